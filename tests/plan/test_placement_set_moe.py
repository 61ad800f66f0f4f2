"""Several MoE models of a set whose routed experts stay in system RAM: each plan weighs its
own RAM side against the RAM free, and the set sums them — two that each fit alone but not
together do not both stay resident, on a card that holds both of their GPU sides."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import CpuMemory
from homelab.plan.budget import device_budget
from homelab.plan.model_set import RAM, PricedModel, place_set
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.workload import CHAT
from homelab.units import GiB
from tests.factory.header_only import write_qwen3_30b_a3b_q4_k_m

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> GgufModel:
    path = tmp_path_factory.mktemp("moe") / "Qwen3-30B-A3B-Q4_K_M.gguf"
    return read_model(str(write_qwen3_30b_a3b_q4_k_m(path, n_ctx_train=262_144)))


def _plan(model: GgufModel, available: int) -> Plan:
    report = probe(snapshot=GPU / "rtx3090_headless.json", window_s=0)
    request = PlanRequest(workload=CHAT, ctx=8192, parallel=1, n_cpu_moe=48)  # experts in RAM
    ram = CpuMemory(total=64 * GiB, available=available)
    return make_plan(model, "moe.gguf", report, request, ram=lambda: ram)


def test_experts_in_ram_are_summed_over_the_residents(model: GgufModel) -> None:
    plan = _plan(model, 24 * GiB)
    assert plan.ram is not None and plan.ram.fits  # alone it fits in RAM
    side = plan.ram.side.total
    assert side is not None and side < plan.ram.usable < 2 * side  # two do not
    budget = device_budget(probe(snapshot=GPU / "rtx3090_headless.json", window_s=0), 0)
    gpu_side = sum(c.total for c in PricedModel("a", plan).costs if c.device != RAM)
    assert 2 * gpu_side < budget.usable  # the card holds both GPU sides
    placed = place_set([PricedModel("a", plan), PricedModel("b", plan)], {"CUDA0": budget})
    assert [m.status for m in placed.members] == ["resident", "swaps"]
    assert placed.members[1].evicts == ("a",)
    assert "on RAM" in placed.members[1].why
    assert placed.used(RAM) == side
    assert RAM in placed.devices and placed.devices[RAM].usable == plan.ram.usable


def test_with_room_for_both_in_ram_both_stay(model: GgufModel) -> None:
    plan = _plan(model, 48 * GiB)
    budget = device_budget(probe(snapshot=GPU / "rtx3090_headless.json", window_s=0), 0)
    placed = place_set([PricedModel("a", plan), PricedModel("b", plan)], {"CUDA0": budget})
    assert [m.status for m in placed.members] == ["resident", "resident"]
