"""The offload ladder's second rung: a MoE model's routed experts in system RAM.

(1) Everything on the card; (2) when that does not give the workload what it asks, the
routed experts of the first N blocks in system RAM, N as small as gives it, with every
layer's attention and KV still on the card; (3) only when no N does (or the RAM side does
not fit system RAM), whole layers off the card (``-ngl K``), as before. A setting the
person gave (``--n-cpu-moe`` / ``--cpu-moe``) skips the ladder: it is honoured as given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from homelab.errors import DoesNotFitError
from homelab.gpu.report import CpuMemory
from homelab.plan.placement import ram_share, with_experts_in_ram
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.budget import WeightPlacement
    from homelab.plan.planner import Plan, PlanRequest

PlanWith = Callable[["WeightPlacement", "PlanRequest"], "Plan"]
"""Plans these weights for this request (the planner's own pass)."""


def system_ram() -> CpuMemory:
    """psutil's figures, looked up through the module so a caller can hold them still."""
    from homelab.gpu import cpu

    return cpu.cpu_memory()


def _try(plan_with: PlanWith, weights: WeightPlacement, request: PlanRequest) -> Plan | None:
    try:
        return plan_with(weights, request)
    except DoesNotFitError:
        return None


def smallest_n(
    weights: WeightPlacement,
    request: PlanRequest,
    plan_with: PlanWith,
    whole: Callable[[Plan], bool],
) -> tuple[int, Plan] | None:
    """The fewest leading blocks whose experts in RAM make ``whole`` true, and that plan;
    None when not even every block's does. More experts in RAM only free the card, so the
    answer is found by bisection."""

    def attempt(n: int) -> Plan | None:
        plan = _try(plan_with, with_experts_in_ram(weights, n), replace(request, n_cpu_moe=n))
        return plan if plan is not None and whole(plan) else None

    lo, hi = 1, len(weights.per_block)
    best = attempt(hi) if hi else None
    if best is None:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        plan = attempt(mid)
        if plan is None:
            lo = mid + 1
        else:
            hi, best = mid, plan
    return hi, best


def _plain_words(plain: Plan | None) -> str:
    """What everything on the card gives, in a few words."""
    if plain is None or plain.verdict != "fits":
        return "Whole on the card the weights leave no room for a conversation"
    alloc = plain.candidate.allocation
    return f"Whole on the card leaves {alloc.ctx_per_slot:,} tokens"


def _gives(plan: Plan) -> str:
    alloc = plan.candidate.allocation
    return f"{plan.settings.n_seq} × {alloc.ctx_per_slot:,}"


def climb(
    weights: WeightPlacement,
    request: PlanRequest,
    plan_with: PlanWith,
    whole: Callable[[Plan], bool],
    ram: Callable[[], CpuMemory] = system_ram,
) -> Plan:
    """Rung 1, else rung 2 with the smallest N that serves the workload, else rung 3
    (whose ``rung`` then says why, when system RAM could not hold the experts).

    Raises:
        DoesNotFitError: no rung gives anything worth serving.
    """
    try:
        plain: Plan | None = plan_with(weights, request)
        failure: DoesNotFitError | None = None
    except DoesNotFitError as error:
        plain, failure = None, error
    if plain is not None and whole(plain):
        return plain
    found = smallest_n(weights, request, plan_with, whole)
    if found is None:
        if plain is None:
            assert failure is not None
            raise failure
        return plain
    n, plan = found
    share = ram_share(plan.weights, 0)
    available = ram().available
    layers = "1 layer" if n == 1 else f"{n} layers"
    if share.mapped > available:
        note = (
            f"The experts of {layers} in system RAM would give {_gives(plan)}, but llama-server "
            f"would map {format_bytes(share.mapped)} of the file there and "
            f"{format_bytes(available)} is available: whole layers go off the card instead."
        )
        if plain is None:
            assert failure is not None
            raise DoesNotFitError(failure.message, hint=note, short_by=failure.short_by)
        return replace(plain, warnings=(note, *plain.warnings), rung=note)
    why = (
        f"{_plain_words(plain)}; experts of {layers} in RAM "
        f"({format_bytes(share.experts)}) give {_gives(plan)}"
    )
    return replace(plan, rung=why)
