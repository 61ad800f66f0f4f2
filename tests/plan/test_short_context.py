"""A context asked for below the planner's shortest worth serving (``MIN_CTX``) is what the
placement leaves room for: a card (or a worker) that holds every block and the asked tokens
keeps them all, where it used to be planned "partial" against room for ``MIN_CTX`` tokens
nobody asked for (``-ngl`` with every block anyway, and a "do not fit" warning), or left out
of the split altogether; and the offload ladder, which asks for a whole plan, then reached
rung 3 where rung 2 served."""

from __future__ import annotations

from dataclasses import replace

import pytest

from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu.cpu import cpu_report
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.budget import HEADROOM_HEADLESS, place_weights
from homelab.plan.choose import MIN_CTX
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.remote_device import RemoteDevice
from homelab.units import GiB, MiB
from tests.factory import write_gguf

ASKED = 512
PLENTY = CpuMemory(total=64 * GiB, available=48 * GiB)
WORKER = RemoteDevice("192.0.2.7:50052", "RPC0", total=64 * GiB, free=60 * GiB)


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> GgufModel:
    folder = tmp_path_factory.mktemp("short")
    path = write_gguf("gpt-oss", folder / "oss.gguf", n_layer=8, n_expert=8, n_ff_exp=512)
    return read_model(str(path))


def _on_worker(model: GgufModel, free: int, ctx: int, n_cpu_moe: int | None = None) -> Plan:
    request = PlanRequest(ctx=ctx, parallel=1, n_cpu_moe=n_cpu_moe)
    worker = replace(WORKER, free=free)
    return make_plan(
        model,
        "oss.gguf",
        cpu_report("no card here: the worker is the card"),
        request,
        remote=(worker,),
        ram=lambda: PLENTY,
    )


def _tight(model: GgufModel, n_cpu_moe: int, slack: int) -> int:
    """Free memory on the worker for the plan at ``ASKED`` tokens with the experts of
    ``n_cpu_moe`` blocks in RAM, and ``slack`` more."""
    (share,) = _on_worker(model, WORKER.free, ASKED, n_cpu_moe).devices
    return HEADROOM_HEADLESS + share.used + slack


def test_a_worker_that_holds_the_asked_context_keeps_every_block(moe: GgufModel) -> None:
    free = _tight(moe, 0, 1 * MiB)
    plan = _on_worker(moe, free, ASKED, 0)
    assert plan.verdict == "fits" and plan.n_gpu_layers is None, plan.warnings
    assert not any("do not fit" in w for w in plan.warnings)
    # ...though it could not hold MIN_CTX tokens: the room really is that tight
    assert _on_worker(moe, free, MIN_CTX, 0).verdict == "partial"


def test_the_ladder_keeps_experts_in_ram_before_whole_layers(moe: GgufModel) -> None:
    experts = place_weights(moe).experts_per_block[-1]
    free = _tight(moe, 3, experts // 2)
    plan = _on_worker(moe, free, ASKED)
    assert plan.weights.n_cpu_moe == 3 and plan.n_gpu_layers is None, plan.warnings
    assert plan.verdict == "fits" and "experts of 3 layers in RAM" in plan.rung


def test_a_card_that_holds_the_asked_context_keeps_every_block(moe: GgufModel) -> None:
    request = PlanRequest(ctx=ASKED, parallel=1, n_cpu_moe=0)
    roomy = make_plan(moe, "oss.gguf", synthetic_report(8 * GiB), request)
    (share,) = roomy.devices
    card = 8 * GiB - share.spare + 1 * MiB
    plan = make_plan(moe, "oss.gguf", synthetic_report(card), request)
    assert plan.verdict == "fits" and plan.n_gpu_layers is None, plan.warnings
    longer = make_plan(moe, "oss.gguf", synthetic_report(card), replace(request, ctx=MIN_CTX))
    assert longer.verdict == "partial"
