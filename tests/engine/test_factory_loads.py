"""Every architecture of the test GGUF factory loads in the REAL llama-server.

For each arch the factory writes a tiny model, llama-server loads it under the
two reference settings and its log must parse into KV (and, for hybrids,
recurrent-state) lines whose sizes match the geometry the factory claims to
reproduce — computed here by hand from the real model's shape, so a factory
that drifts from real geometry, a server that no longer loads a file, or a
parser that misreads a line all fail this test.

Run as ``python -m pytest`` from the repository root (``tests.factory`` is
imported through the root on ``sys.path``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from homelab.engine.llamacpp.log import FailureKind, LoadLog, parse_load_log
from tests.factory import ACCEPTANCE_ARCHS, ARCHS, geometry, write_gguf
from tests.factory.keys import memory_keys
from tests.factory.mib import buffer_mib, mib_matches
from tests.factory.server_log import SETTING_A, SETTING_B, SETTING_B_SAME_TYPES, capture_load_log

pytestmark = pytest.mark.engine

# Bytes per element * 32 of the KV types used here (ggml block sizes).
_ROW32 = {"f32": 128, "f16": 64, "q8_0": 34, "q4_0": 18}


@dataclass(frozen=True)
class Expect:
    """Real-model memory geometry: KV layers/widths, SWA layers/window, RS per layer."""

    layers: int  # full-attention layers owning K/V
    k: int  # K row width (n_head_kv * key_length), elements
    v: int  # V row width; 0 for MLA (K only)
    swa_layers: int = 0
    n_swa: int = 0
    rs_layers: int = 0
    r: int = 0  # recurrent conv-state floats per layer per sequence
    s: int = 0  # recurrent ssm-state floats per layer per sequence


_GDN_R, _GDN_S = 3 * (4096 + 2 * 16 * 128), 128 * 4096  # conv 4, inner 4096, 16 groups, state 128
EXPECTED: dict[str, Expect] = {
    "llama": Expect(32, 1024, 1024),
    "mistral3": Expect(40, 1024, 1024),
    "qwen2": Expect(24, 128, 128),
    "qwen3": Expect(36, 1024, 1024),
    "qwen3moe": Expect(48, 512, 512),
    "phi3": Expect(32, 192, 192),  # sliding_window 2047 in the file, ignored by llama.cpp
    "gemma2": Expect(21, 2048, 2048, swa_layers=21, n_swa=4096),
    "gemma3": Expect(8, 2048, 2048, swa_layers=40, n_swa=1024),
    "gpt-oss": Expect(12, 512, 512, swa_layers=12, n_swa=128),
    "qwen35": Expect(8, 1024, 1024, rs_layers=24, r=_GDN_R, s=_GDN_S),
    "qwen35moe": Expect(10, 512, 512, rs_layers=30, r=_GDN_R, s=_GDN_S),
    "qwen3next": Expect(12, 512, 512, rs_layers=36, r=_GDN_R, s=_GDN_S),
    "granitehybrid": Expect(4, 1024, 1024, rs_layers=36, r=3 * (128 + 256), s=128 * 128),
    "nemotron_h": Expect(4, 1024, 1024, rs_layers=24, r=3 * (1024 + 2 * 8 * 128), s=128 * 1024),
    "lfm2": Expect(6, 512, 512, rs_layers=10, r=512 * 2, s=0),
    "nemotron_h_moe": Expect(6, 256, 256, rs_layers=23, r=3 * (4096 + 2 * 8 * 128), s=128 * 4096),
    "lfm2moe": Expect(6, 512, 512, rs_layers=18, r=512 * 2, s=0),
    "qwen2moe": Expect(28, 512, 512),
    "glm4moe": Expect(46, 1024, 1024),  # + 1 NextN block that keeps no KV in the main context
    "deepseek2": Expect(27, 576, 0),
}
MLA_ARCHS = {"deepseek2"}


def _pad256(n: int) -> int:
    return (n + 255) // 256 * 256


def _arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _check(log: LoadLog, exp: Expect, args: list[str]) -> None:
    """The parsed KV/RS lines equal what the expected geometry gives for ``args``."""
    assert log.ready, f"not listening; failures: {log.failures}"
    assert not log.failures, log.failures
    n_ctx, n_seq = int(_arg(args, "-c")), int(_arg(args, "-np"))
    tk, tv = _arg(args, "-ctk"), _arg(args, "-ctv")
    ctx_seq = _pad256(n_ctx // n_seq)  # explicit -np: not unified, one stream per sequence
    assert (log.context.n_ctx_seq, log.context.n_seq_max) == (ctx_seq, n_seq)
    assert log.context.n_ctx == ctx_seq * n_seq
    expected = [(exp.layers, ctx_seq, None if not exp.swa_layers else False)]
    if exp.swa_layers:
        expected.append((exp.swa_layers, _pad256(min(ctx_seq, exp.n_swa + 512)), True))
    assert [(kv.layers, kv.cells, kv.swa) for kv in log.kv_caches] == expected
    for kv in log.kv_caches:
        assert (kv.n_seq_max, kv.n_stream, kv.type_k, kv.type_v) == (n_seq, n_seq, tk, tv)
        elems = kv.layers * kv.cells * kv.n_stream  # cells over all streams
        k_bytes = elems * exp.k * _ROW32[tk] // 32
        v_bytes = elems * exp.v * _ROW32[tv] // 32
        assert mib_matches(k_bytes, kv.k_mib, single_precision=True), (kv, k_bytes)
        assert mib_matches(v_bytes, kv.v_mib, single_precision=True), (kv, v_bytes)
        assert mib_matches(k_bytes + v_bytes, kv.size_mib, single_precision=True)
    assert buffer_mib(log, "KV") == pytest.approx(
        sum(kv.size_mib for kv in log.kv_caches), abs=0.02
    )
    if exp.rs_layers:
        (rs,) = log.recurrent
        assert (rs.cells, rs.n_seq_max, rs.n_rs_seq) == (n_seq, n_seq, 0)
        assert mib_matches(4 * exp.r * n_seq * exp.rs_layers, rs.r_mib, single_precision=True)
        assert mib_matches(4 * exp.s * n_seq * exp.rs_layers, rs.s_mib, single_precision=True)
    else:
        assert log.recurrent == ()


@pytest.fixture(scope="module")
def factory_models(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Each arch written once per module (~0.1-0.6 s and 5-55 MB each; ~420 MB in all,
    removed again when the module is done)."""
    root = tmp_path_factory.mktemp("factory")
    yield {arch: write_gguf(arch, root / f"{arch}.gguf") for arch in ARCHS}
    shutil.rmtree(root, ignore_errors=True)


def test_factory_covers_the_acceptance_set_and_expectations() -> None:
    assert set(ACCEPTANCE_ARCHS) <= set(ARCHS)
    assert set(EXPECTED) == set(ARCHS)


def test_unknown_geometry_override_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="n_layers"):
        write_gguf("llama", tmp_path / "x.gguf", n_layers=3)
    with pytest.raises(KeyError):
        geometry("no-such-arch")


@pytest.mark.parametrize("arch", ARCHS)
def test_memory_keys_are_written_as_the_converter_does(
    arch: str, factory_models: dict[str, Path]
) -> None:
    keys = memory_keys(factory_models[arch])
    g = geometry(arch)
    assert keys["general.architecture"] == arch
    assert keys["context_length"] == g["n_ctx_train"]
    # No converter of these archs writes a sliding-window pattern: llama.cpp's default rules.
    assert "attention.sliding_window_pattern" not in keys
    if arch in MLA_ARCHS:
        assert (
            keys["attention.head_count_kv"],
            keys["attention.key_length"],
            keys["attention.value_length"],
        ) == (1, 576, 512)
        assert (keys["attention.key_length_mla"], keys["attention.value_length_mla"]) == (192, 128)
    if arch in ("granitehybrid", "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe"):
        assert isinstance(keys["attention.head_count_kv"], list)
        assert len(keys["attention.head_count_kv"]) == keys["block_count"]
    if arch in ("nemotron_h", "nemotron_h_moe"):
        assert isinstance(keys["feed_forward_length"], list)
    if arch == "glm4moe":
        assert (keys["block_count"], keys["nextn_predict_layers"]) == (47, 1)
    if arch in ("qwen35", "qwen35moe", "qwen3next"):
        assert keys["full_attention_interval"] == 4
        assert ("attention.recurrent_layers" in keys) == (arch != "qwen3next")


@pytest.mark.parametrize("arch", ARCHS)
def test_loads_q8_kv_single_slot(
    arch: str, factory_models: dict[str, Path], llama_server_bin: Path
) -> None:
    text = capture_load_log(llama_server_bin, factory_models[arch], SETTING_A)
    _check(parse_load_log(text), EXPECTED[arch], SETTING_A)


@pytest.mark.parametrize("arch", ARCHS)
def test_loads_mixed_kv_three_slots(
    arch: str, factory_models: dict[str, Path], llama_server_bin: Path
) -> None:
    text = capture_load_log(llama_server_bin, factory_models[arch], SETTING_B)
    log = parse_load_log(text)
    if arch in MLA_ARCHS:  # MLA caches K only and refuses different K and V types
        assert not log.ready
        assert FailureKind.KV_TYPES_MUST_MATCH in {f.kind for f in log.failures}
        text = capture_load_log(llama_server_bin, factory_models[arch], SETTING_B_SAME_TYPES)
        _check(parse_load_log(text), EXPECTED[arch], SETTING_B_SAME_TYPES)
    else:
        _check(log, EXPECTED[arch], SETTING_B)


def test_mtp_block_is_excluded_from_the_kv_cache(tmp_path: Path, llama_server_bin: Path) -> None:
    model = write_gguf("qwen35", tmp_path / "qwen35-mtp.gguf", nextn_predict_layers=1)
    assert memory_keys(model)["block_count"] == 33
    _check(
        parse_load_log(capture_load_log(llama_server_bin, model, SETTING_A)),
        EXPECTED["qwen35"],
        SETTING_A,
    )


def test_recurrent_layers_fall_back_to_the_interval(tmp_path: Path, llama_server_bin: Path) -> None:
    model = write_gguf(
        "qwen35",
        tmp_path / "qwen35-interval.gguf",
        write_recurrent_layers=False,
        full_attention_interval=2,
    )
    assert "attention.recurrent_layers" not in memory_keys(model)
    exp = Expect(16, 1024, 1024, rs_layers=16, r=_GDN_R, s=_GDN_S)
    _check(parse_load_log(capture_load_log(llama_server_bin, model, SETTING_A)), exp, SETTING_A)
