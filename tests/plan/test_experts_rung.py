"""The offload ladder's second rung: a MoE model that does not serve its workload whole on
the card keeps the experts of the fewest leading blocks in system RAM, attention and KV on
the card, before any whole layer leaves it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.errors import DoesNotFitError
from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.placement import is_routed_expert, plan_ram
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.rung import rung_dict
from homelab.plan.workload import AGENT
from homelab.units import GiB
from tests.factory import write_gguf

CARD = 6 * GiB
EXPERT_TENSOR = 384 << 20
"""Each of a block's three routed-expert tensors, in the header (nothing is written)."""
PLENTY = CpuMemory(total=64 * GiB, available=48 * GiB)
SCARCE = CpuMemory(total=4 * GiB, available=1 * GiB)


def _inflated(path: Path) -> GgufModel:
    """The factory's tiny qwen3moe with its routed experts sized like a real MoE's, offsets
    laid out again in file order: a header-only model."""
    model = read_model(str(path))
    header = model.parts[0]
    offset, tensors = 0, []
    for t in sorted(header.tensors, key=lambda t: t.offset):
        size = EXPERT_TENSOR if is_routed_expert(t.name) else t.n_bytes or 0
        tensors.append(t._replace(offset=offset, n_bytes=size))
        offset += size
    return GgufModel(parts=(replace(header, tensors=tuple(tensors)),))


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> GgufModel:
    folder = tmp_path_factory.mktemp("rung")
    return _inflated(write_gguf("qwen3moe", folder / "q3moe.gguf", n_layer=8, n_ctx_train=131072))


def _plan(model: GgufModel, n: int | None = None, ram: CpuMemory = PLENTY) -> Plan:
    request = PlanRequest(workload=AGENT, n_cpu_moe=n)
    return make_plan(model, "moe.gguf", synthetic_report(CARD), request, ram=lambda: ram)


def _serves(plan: Plan) -> bool:
    return (
        plan.verdict == "fits" and plan.candidate.allocation.ctx_per_slot >= AGENT.tokens_per_slot
    )


def test_the_smallest_n_that_serves_the_workload_is_chosen(moe: GgufModel) -> None:
    plan = _plan(moe)
    n = plan.weights.n_cpu_moe
    assert 1 < n < 8
    assert _serves(plan) and plan.n_gpu_layers is None
    # N - 1 does not serve it (given by hand, nothing else changes)
    fewer = _plan(moe, n - 1)
    assert not _serves(fewer)
    # every layer's KV on the card
    assert plan.devices[0].n_blocks == 8 and plan.devices[0].first_block == 0
    argv = llama_server_argv(plan)
    assert argv[argv.index("--n-cpu-moe") + 1] == str(n)
    assert argv[argv.index("-ngl") + 1] == "all"
    ram = plan_ram(plan)
    assert ram is not None and ram.n_cpu_moe == n
    why = next(s for s in plan.steps if s.formula.startswith("Whole on the card"))
    assert f"experts of {n} layers in RAM" in why.formula
    assert f"× {plan.candidate.allocation.ctx_per_slot:,}" in why.formula


def test_without_the_ladder_whole_layers_would_leave_the_card(moe: GgufModel) -> None:
    plain = _plan(moe, 0)  # 0 given by the person: no experts in RAM
    assert plain.weights.n_cpu_moe == 0
    assert plain.n_gpu_layers is not None or not _serves(plain)


def test_too_little_ram_falls_back_to_whole_layers_and_says_why(moe: GgufModel) -> None:
    plan = _plan(moe, ram=SCARCE)
    assert plan.weights.n_cpu_moe == 0 and plan.verdict == "partial"
    argv = llama_server_argv(plan)
    assert "--n-cpu-moe" not in argv and argv[argv.index("-ngl") + 1] != "all"
    assert any("whole layers go off the card instead" in w for w in plan.warnings)
    assert "whole layers go off the card instead" in plan.rung  # the ladder's reason (--json)
    assert rung_dict(plan) == {"kind": "layers_off", "why": plan.rung}


def test_the_whole_ram_side_and_the_headroom_are_weighed(moe: GgufModel) -> None:
    """Not the mapped span against ``available`` alone: mapped + repacked + compute against
    available less the headroom, to the byte."""
    chosen = _plan(moe)
    check = chosen.ram
    assert check is not None and check.fits and check.side.total is not None
    assert check.side.repack == 0  # beside a CUDA card nothing is repacked
    assert check.side.compute > 0
    need = check.side.total + check.headroom
    just = _plan(moe, ram=CpuMemory(total=64 * GiB, available=need))
    assert just.weights.n_cpu_moe == chosen.weights.n_cpu_moe and just.rung
    short = _plan(moe, ram=CpuMemory(total=64 * GiB, available=need - 1))
    assert short.weights.n_cpu_moe == 0 and short.ram is None
    assert "push this machine into swap" in short.rung  # the rung says why it stepped down
    assert any("push this machine into swap" in w for w in short.warnings)
    with pytest.raises(DoesNotFitError, match="push this machine into swap"):
        _plan(moe, chosen.weights.n_cpu_moe, ram=CpuMemory(total=64 * GiB, available=need - 1))


def test_the_person_s_own_setting_wins(moe: GgufModel) -> None:
    plan = _plan(moe, 2)
    assert plan.weights.n_cpu_moe == 2 and not plan.rung
    argv = llama_server_argv(plan)
    assert argv[argv.index("--n-cpu-moe") + 1] == "2"


def test_a_moe_model_that_fits_whole_stays_whole(tmp_path: Path) -> None:
    small = read_model(str(write_gguf("qwen3moe", tmp_path / "small.gguf", n_layer=8)))
    plan = make_plan(small, "s.gguf", synthetic_report(CARD), PlanRequest(), ram=lambda: SCARCE)
    assert plan.weights.n_cpu_moe == 0 and not plan.rung and plan.n_gpu_layers is None


def test_ram_is_weighed_at_its_worst_the_card_probe_sampled_or_now(moe: GgufModel) -> None:
    """The probe's lowest RAM of its window counts when it is lower than RAM now (the
    desktop's share at its worst); RAM now counts when it is lower; the sample alone when
    RAM cannot be read now."""
    from dataclasses import replace

    need = _plan(moe).ram
    assert need is not None and need.side.total is not None
    enough = need.side.total + need.headroom
    low = CpuMemory(total=64 * GiB, available=enough - 1)
    card = replace(synthetic_report(CARD), ram_low=low)
    request = PlanRequest(workload=AGENT)
    stepped = make_plan(moe, "moe.gguf", card, request, ram=lambda: PLENTY)
    assert stepped.weights.n_cpu_moe == 0 and "swap" in stepped.rung
    roomy = replace(card, ram_low=PLENTY)
    scarce_now = CpuMemory(total=64 * GiB, available=enough - 1)
    assert make_plan(moe, "m", roomy, request, ram=lambda: scarce_now).weights.n_cpu_moe == 0
    kept = make_plan(moe, "m", roomy, request, ram=lambda: None)
    assert kept.weights.n_cpu_moe > 0 and kept.ram is not None
    assert kept.ram.available == PLENTY.available
