"""Acceptance: the planned KV / SWA / recurrent bytes equal what the real llama-server logs.

For tiny GGUFs with real attention geometry (written by tests/factory), at several
-c / -np / -kvu / cache types / flash-attention / ubatch settings, llama-server is run
with -lv 4 and its ``llama_kv_cache: size = …`` and ``llama_memory_recurrent: size = …``
lines are compared with ``kv_allocation`` — cells and layers exactly, MiB figures to
the log line's own rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from homelab.engine.llamacpp.log import LoadLog, parse_load_log
from homelab.gguf.archs import rule_for
from homelab.gguf.geometry import geometry_of
from homelab.gguf.model_file import read_model
from homelab.plan.kv import KvAllocation, KvSettings, kv_allocation
from tests.factory import ACCEPTANCE_ARCHS, ARCHS, write_gguf
from tests.factory.mib import mib_matches
from tests.factory.server_log import capture_load_log

pytestmark = pytest.mark.engine


@dataclass(frozen=True)
class Setting:
    name: str
    ctx: int
    n_seq: int
    type_k: str
    type_v: str
    unified: bool = False
    flash_attn: bool = True
    ubatch: int = 512

    def argv(self) -> list[str]:
        args = [
            "-c",
            str(self.ctx),
            "-np",
            str(self.n_seq),
            "-ctk",
            self.type_k,
            "-ctv",
            self.type_v,
        ]
        args += ["-fa", "on" if self.flash_attn else "off", "-ub", str(self.ubatch)]
        if self.unified:
            args.append("-kvu")
        return args

    def kv_settings(self) -> KvSettings:
        return KvSettings(
            n_ctx=self.ctx,
            n_seq=self.n_seq,
            unified=self.unified,
            n_ubatch=self.ubatch,
            type_k=self.type_k,
            type_v=self.type_v,
            flash_attn=self.flash_attn,
        )


SETTINGS = {
    "q8_0 4k": Setting("q8_0 4k", 4096, 1, "q8_0", "q8_0"),
    "f16/q4_0 8k×3": Setting("f16/q4_0 8k×3", 8192, 3, "f16", "q4_0"),
    "q5_1 10000×2 unified": Setting(
        "q5_1 10000×2 unified", 10_000, 2, "q5_1", "q5_1", unified=True
    ),
    "f16 no-FA 3000": Setting("f16 no-FA 3000", 3000, 1, "f16", "f16", flash_attn=False),
    "bf16/iq4_nl 20000×4 ub256": Setting(
        "bf16/iq4_nl 20000×4 ub256", 20_000, 4, "bf16", "iq4_nl", ubatch=256
    ),
}
MLA_SAME_TYPES = {
    "f16/q4_0 8k×3": ("q4_0", "q4_0"),
    "bf16/iq4_nl 20000×4 ub256": ("iq4_nl", "iq4_nl"),
}


def _cases() -> list[tuple[str, str]]:
    cases = []
    for arch in ARCHS:
        names = list(SETTINGS) if arch in ACCEPTANCE_ARCHS else ["q8_0 4k", "q5_1 10000×2 unified"]
        cases += [(arch, name) for name in names]
    return cases


@pytest.fixture(scope="session")
def factory_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("factory-models")
    return {arch: write_gguf(arch, folder / f"{arch}.gguf") for arch in ARCHS}


def _compare(
    log: LoadLog, alloc: KvAllocation, n_kv_full: int, n_kv_swa: int, setting: Setting
) -> None:
    caches = {line.swa: line for line in log.kv_caches}
    # one KV cache line per kind of KV layer the plan knows (full, SWA): no more, no fewer
    assert len(log.kv_caches) == bool(n_kv_full) + bool(n_kv_swa), log.kv_caches
    for line in log.kv_caches:  # both, not either: one stream per slot unless unified
        assert (line.n_stream, line.n_seq_max) == (alloc.n_stream, setting.n_seq), line
    full = caches.get(False) or caches.get(None)
    if n_kv_full:
        assert full is not None, "no non-SWA KV line in the log"
        assert full.cells == alloc.ctx_per_seq
        assert full.layers == n_kv_full
        assert mib_matches(alloc.full_k, full.k_mib, single_precision=True), (
            alloc.full_k,
            full.k_mib,
        )
        assert mib_matches(alloc.full_v, full.v_mib, single_precision=True), (
            alloc.full_v,
            full.v_mib,
        )
        assert mib_matches(alloc.full_bytes, full.size_mib, single_precision=True)
    if n_kv_swa:
        swa = caches.get(True)
        assert swa is not None, "no SWA KV line in the log"
        assert swa.cells == alloc.swa_cells
        assert swa.layers == n_kv_swa
        assert mib_matches(alloc.swa_k, swa.k_mib, single_precision=True), (alloc.swa_k, swa.k_mib)
        assert mib_matches(alloc.swa_v, swa.v_mib, single_precision=True), (alloc.swa_v, swa.v_mib)
    else:
        assert True not in caches, "llama-server made a SWA cache the plan does not know about"
    if alloc.recurrent_bytes:
        assert len(log.recurrent) == 1, "expected one recurrent-state line"
        rs = log.recurrent[0]
        assert rs.cells == max(1, setting.n_seq)
        assert mib_matches(alloc.recurrent_r, rs.r_mib, single_precision=True), (
            alloc.recurrent_r,
            rs.r_mib,
        )
        assert mib_matches(alloc.recurrent_s, rs.s_mib, single_precision=True), (
            alloc.recurrent_s,
            rs.s_mib,
        )
    else:
        assert not log.recurrent, "llama-server keeps recurrent state the plan does not know about"
    assert log.context.n_ctx == alloc.n_ctx


@pytest.mark.parametrize(("arch", "setting_name"), _cases())
def test_planned_kv_equals_llama_server_log(
    arch: str, setting_name: str, factory_models: dict[str, Path], llama_server_bin: Path
) -> None:
    setting = SETTINGS[setting_name]
    geometry = geometry_of(read_model(factory_models[arch]))
    if geometry.is_mla and setting_name in MLA_SAME_TYPES:
        type_k, type_v = MLA_SAME_TYPES[setting_name]
        setting = Setting(
            setting.name,
            setting.ctx,
            setting.n_seq,
            type_k,
            type_v,
            setting.unified,
            setting.flash_attn,
            setting.ubatch,
        )
    log = parse_load_log(capture_load_log(llama_server_bin, factory_models[arch], setting.argv()))
    assert not log.failures, [f.line for f in log.failures]
    alloc = kv_allocation(geometry, setting.kv_settings())
    _compare(log, alloc, len(geometry.full_layers), len(geometry.swa_layers), setting)


def test_verified_means_checked_above() -> None:
    """Every arch checked above is 'verified', and nothing else claims to be."""
    from homelab.gguf.archs import RULES

    assert {arch for arch, rule in RULES.items() if rule.verified} == set(ARCHS)
    assert all(rule_for(arch) is not None for arch in ARCHS)


def test_real_smollm2_kv_matches(smollm2_gguf: Path, llama_server_bin: Path) -> None:
    setting = SETTINGS["f16/q4_0 8k×3"]
    log = parse_load_log(capture_load_log(llama_server_bin, smollm2_gguf, setting.argv()))
    geometry = geometry_of(read_model(smollm2_gguf))
    alloc = kv_allocation(geometry, setting.kv_settings())
    _compare(log, alloc, 30, 0, setting)


@pytest.mark.parametrize("name", ["SmolLM2", *ACCEPTANCE_ARCHS])
def test_compute_estimate_is_in_the_engines_ballpark(
    name: str, smollm2_gguf: Path, factory_models: dict[str, Path], llama_server_bin: Path
) -> None:
    """The compute buffer is an estimate (llama.cpp has no closed form); on the CPU backend it
    must stay within 0.7×–1.5× of what llama-server reserves, for dense, SWA, MLA and hybrid models."""
    from homelab.plan.engine_state import estimate_engine_state

    path = smollm2_gguf if name == "SmolLM2" else factory_models[name]
    geometry = geometry_of(read_model(path))
    for setting in (SETTINGS["f16/q4_0 8k×3"], SETTINGS["q8_0 4k"]):
        if geometry.is_mla and setting.name in MLA_SAME_TYPES:
            continue
        log = parse_load_log(capture_load_log(llama_server_bin, path, setting.argv()))
        logged = [b.mib for b in log.buffers if b.kind == "compute"]
        assert logged, "no compute buffer line"
        kv = setting.kv_settings()
        engine = estimate_engine_state(geometry, kv_allocation(geometry, kv), kv, on_gpu=False)
        ratio = engine.compute_buffer / (sum(logged) * 1024 * 1024)
        assert 0.7 <= ratio <= 1.5, (setting.name, ratio)
