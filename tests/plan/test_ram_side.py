"""The RAM side of a plan with experts in system RAM: what llama.cpp's CPU backend repacks on
this CPU, the mapped span that is left, and the budget it is weighed against (psutil's
available less a headroom): fits, refused, stepped down, or said to be unchecked."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.errors import DoesNotFitError
from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.budget import HEADROOM_RAM, place_weights
from homelab.plan.cpu_repack import engine_features, repacked_size, repacks
from homelab.plan.placement import in_ram, ram_share, with_experts_in_ram
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.ram_side import ram_side
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.serialize import plan_to_dict
from homelab.plan.working import render_steps
from homelab.units import GiB
from tests.factory import write_gguf

EPYC = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni"})
"""This machine's CPU (an AMD EPYC), the flags that matter."""
OLD_X86 = frozenset({"sse4_2", "avx"})
PLENTY = CpuMemory(total=64 * GiB, available=48 * GiB)
NO_CARD = GpuReport(source="cpu", devices=(), cpu=PLENTY, note="no GPU")
WORKER = RemoteDevice("127.0.0.1:50052", "RPC0", total=16 * GiB, free=15 * GiB)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GgufModel]:
    folder = tmp_path_factory.mktemp("ram")
    geometry = {"n_layer": 4, "n_expert": 8, "n_ff_exp": 512}
    return {
        kind: read_model(str(write_gguf("qwen3moe", folder / f"{kind}.gguf", **extra)))
        for kind, extra in {
            "q4_0": {**geometry, "weight_type": "q4_0"},
            "q8_0": {**geometry, "weight_type": "q8_0"},
            # Q4_K where a row is 256 wide (the down experts), F16 elsewhere
            "q4_k": {**geometry, "weight_type": "q4_k"},
            "f16": geometry,
            # gate/up of 36 rows: Q4_0, but no 8-row layout fits them
            "odd": {**geometry, "n_ff_exp": 36, "weight_type": "q4_0"},
        }.items()
    }


def test_the_flags_come_from_proc_cpuinfo(tmp_path: Path) -> None:
    text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse4_2 avx avx2 avx512f\n"
    assert cpu.parse_cpu_flags(text) == {"fpu", "sse4_2", "avx", "avx2", "avx512f"}
    assert cpu.parse_cpu_flags("processor\t: 0\nFeatures\t: neon asimd\n") is None
    assert cpu.cpu_flags(tmp_path / "missing") is None
    here = cpu.cpu_flags()  # this machine's own (x86-64 with AVX2 where the tests run)
    assert here is None or "avx2" in here or not engine_features(here) & {"avx2"}


def test_which_types_are_repacked_on_which_features() -> None:
    built = engine_features(EPYC)
    assert built is not None and "avx2" in built
    assert "avx512f" not in built  # homelab's build does not compile AVX512 in
    assert repacks("Q4_0", 512, built) and repacks("Q4_K", 64, built)
    assert repacks("IQ4_NL", 8, built) and repacks("MXFP4", 2880, built)
    assert repacks("Q4_0", 36, built) is False  # no 8-row layout
    assert repacks("Q8_0", 512, built) is False  # only ARM and RISC-V repack Q8_0
    assert repacks("Q2_K", 512, built) is False  # AVX512F, which the build lacks
    assert repacks("Q2_K", 512, frozenset({"avx512f"})) is True
    assert repacks("Q4_0", 512, engine_features(OLD_X86)) is False
    assert repacks("Q4_0", None, built) is False  # not a matrix product (GET_ROWS, a bias)
    assert repacks("F16", 512, None) is False
    assert repacks("Q4_0", 512, None) is None  # a CPU homelab does not know
    assert repacked_size(1) == 32 and repacked_size(64) == 64


def test_repacked_experts_leave_the_mapped_span(models: dict[str, GgufModel]) -> None:
    weights = with_experts_in_ram(place_weights(models["q4_0"]), 2)
    slots = list(in_ram(weights, 0))
    experts = [s for s in slots if s.expert]
    assert experts and all(s.type_name == "Q4_0" for s in experts)
    over_rpc = ram_side(weights, 0, EPYC, host_buffer=False, compute=0)
    assert over_rpc.repack == sum(repacked_size(s.n_bytes) for s in experts)
    # only the input embedding is left mapped (it is looked up, never multiplied)
    (embedding,) = (s for s in slots if s.embedding)
    assert over_rpc.mapped == embedding.n_bytes
    # beside a CUDA card its pinned host buffer comes first: nothing repacked, all mapped
    beside_cuda = ram_side(weights, 0, EPYC, host_buffer=True, compute=0)
    assert beside_cuda.repack == 0 and beside_cuda.mapped > over_rpc.mapped + over_rpc.repack / 2
    unknown = ram_side(weights, 0, None, host_buffer=False, compute=7)
    assert unknown.repack is None and unknown.total is None
    # what must stay is the CPU's tensors themselves, not the span the card's lie inside
    beside = ram_side(weights, 0, None, host_buffer=True, compute=7)
    assert beside.resident < beside.mapped and beside.total == beside.resident + 7


def test_a_mixed_model_repacks_only_its_q4_k_experts(models: dict[str, GgufModel]) -> None:
    weights = with_experts_in_ram(place_weights(models["q4_k"]), 2)
    slots = list(in_ram(weights, 0))
    packed = [s for s in slots if s.type_name == "Q4_K"]
    assert packed and all(s.expert for s in packed)
    side = ram_side(weights, 0, EPYC, host_buffer=False, compute=0)
    assert side.repack == sum(repacked_size(s.n_bytes) for s in packed)
    # the embedding and the F16 gate/up experts of blocks 0-1 stay mapped: from the
    # embedding's first byte to block 1's last F16 expert's last (the cards' tensors between)
    kept = [s for s in slots if s.type_name != "Q4_K"]
    first, last = min(s.offset for s in kept), max(s.offset + s.n_bytes for s in kept)
    assert side.mapped == last - first < ram_share(weights, 0).mapped


@pytest.mark.parametrize("kind", ["q8_0", "f16", "odd"])
def test_types_the_cpu_does_not_repack_stay_mapped(models: dict[str, GgufModel], kind: str) -> None:
    """Q8_0 (no x86 layout), F16, and Q4_0 whose 36 rows no 8-row layout takes."""
    weights = with_experts_in_ram(place_weights(models[kind]), 3)
    side = ram_side(weights, 0, EPYC, host_buffer=False, compute=0)
    assert side.repack == 0 and side.mapped == ram_share(weights, 0).mapped


def _rpc_plan(model: GgufModel, n: int | None, ram: CpuMemory | None, flags=EPYC) -> Plan:
    request = PlanRequest(ctx=4096, parallel=1, n_cpu_moe=n)
    return make_plan(
        model, "m.gguf", NO_CARD, request, remote=(WORKER,), ram=lambda: ram, cpu=lambda: flags
    )


def test_the_working_and_json_carry_the_ram_terms(models: dict[str, GgufModel]) -> None:
    plan = _rpc_plan(models["q4_0"], 2, PLENTY)
    check = plan.ram
    assert check is not None and check.fits is True and check.side.repack
    assert check.side.compute > 0
    rows = render_steps(plan.steps)
    text = "\n".join(rows)
    assert f"CPU_REPACK {check.side.repack:,} B" in text
    assert f"CPU_Mapped span {check.side.mapped:,} B" in text
    assert f"the CPU's mapped tensors {check.side.resident:,} B" in text
    usable = PLENTY.available - HEADROOM_RAM
    assert f"headroom = {usable:,} B" in text and "fits" in text
    data = plan_to_dict(plan, llama_server_argv(plan))["ram"]
    assert data["repack"] == check.side.repack and data["mapped"] == check.side.mapped
    assert data["available"] == PLENTY.available and data["headroom"] == HEADROOM_RAM
    assert data["compute"] == check.side.compute and data["resident"] == check.side.resident


def test_the_person_s_setting_that_would_swap_is_refused(models: dict[str, GgufModel]) -> None:
    tiny = CpuMemory(total=4 * GiB, available=2 * GiB + 1024)  # 1 KiB past the headroom
    with pytest.raises(DoesNotFitError) as caught:
        _rpc_plan(models["q4_0"], 4, tiny)
    error = caught.value
    assert "push this machine into swap" in error.message
    assert "repacked" in error.message and "headroom" in error.message
    assert error.hint and "--n-cpu-moe" in error.hint
    assert error.short_by and error.short_by > 0


def test_unknown_ram_is_none_and_the_plan_says_so(
    models: dict[str, GgufModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psutil

    def broken() -> None:
        raise OSError("no /proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", broken)  # psutil is not ours: it fails here
    assert cpu.ram_now() is None
    plan = _rpc_plan(models["q4_0"], 2, cpu.ram_now())
    assert plan.ram is not None and plan.ram.available is None and plan.ram.fits is None
    assert any("RAM check could not be made" in w for w in plan.warnings)
    assert "not checked" in "\n".join(render_steps(plan.steps))
    assert plan_to_dict(plan, llama_server_argv(plan))["ram"]["available"] is None


def test_figures_no_machine_has_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=0, available=0))
    assert cpu.ram_now() is None
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=GiB, available=2 * GiB))
    assert cpu.ram_now() is None


def test_an_unknown_cpu_leaves_the_repack_term_unknown(models: dict[str, GgufModel]) -> None:
    plan = _rpc_plan(models["q4_0"], 2, PLENTY, flags=None)
    assert plan.ram is not None and plan.ram.side.repack is None and plan.ram.fits is None
    assert any("repack" in w and "could not be made" in w for w in plan.warnings)
    # a type no CPU repacks is known whatever the CPU
    f16 = _rpc_plan(models["f16"], 2, PLENTY, flags=None)
    assert f16.ram is not None and f16.ram.side.repack == 0 and f16.ram.fits is True
