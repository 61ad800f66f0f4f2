"""The offload ladder's second rung: a MoE model's routed experts in system RAM.

(1) Everything on the card; (2) when that does not give the workload what it asks, the
routed experts of the first N blocks in system RAM, N as small as gives it, with every
layer's attention and KV still on the card; (3) only when no N does (or the RAM side does
not fit system RAM), whole layers off the card (``-ngl K``), as before. A setting the
person gave (``--n-cpu-moe`` / ``--cpu-moe``) skips the ladder: it is honoured as given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from homelab.errors import DoesNotFitError
from homelab.gpu.report import CpuMemory
from homelab.plan.placement import ram_share, with_experts_in_ram
from homelab.plan.ram_side import RamCheck, check_ram, ram_side
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.budget import WeightPlacement
    from homelab.plan.planner import Plan, PlanRequest

PlanWith = Callable[["WeightPlacement", "PlanRequest"], "Plan"]
"""Plans these weights for this request (the planner's own pass)."""


def system_ram() -> CpuMemory | None:
    """psutil's figures (None when it cannot say), looked up through the module so a caller
    can hold them still."""
    from homelab.gpu import cpu

    return cpu.ram_now()


def at_worst(
    ram: Callable[[], CpuMemory | None], sampled: CpuMemory | None
) -> Callable[[], CpuMemory | None]:
    """``ram``, or the lowest RAM the card's probe sampled when that is lower (the desktop's
    share at its worst, as the card's is planned on); the sample alone when ``ram`` cannot say."""
    if sampled is None:
        return ram

    def worst() -> CpuMemory | None:
        now = ram()
        return sampled if now is None or sampled.available < now.available else now

    return worst


def system_cpu() -> frozenset[str] | None:
    """The CPU's feature flags (None: a CPU homelab cannot read)."""
    from homelab.gpu import cpu

    return cpu.cpu_flags()


@dataclass(frozen=True, slots=True)
class RamProbe:
    """Where a plan's RAM side is weighed: the machine's RAM and CPU now, and the CPU's
    compute buffer for this model and micro-batch."""

    compute: int = 0
    ram: Callable[[], CpuMemory | None] = system_ram
    cpu: Callable[[], frozenset[str] | None] = system_cpu

    def check(self, plan: Plan) -> RamCheck:
        """The plan's RAM side (experts in RAM, blocks below -ngl on the CPU) against RAM now."""
        n_blocks = len(plan.weights.per_block)
        first = 0 if plan.n_gpu_layers is None else n_blocks - (plan.n_gpu_layers - 1)
        host = any(not share.device.remote for share in plan.devices)
        side = ram_side(plan.weights, first, self.cpu(), host_buffer=host, compute=self.compute)
        return check_ram(side, self.ram())


def honour(plan: Plan, probe: RamProbe) -> Plan:
    """The person's own experts setting, with its RAM side weighed: refused when it would
    push the machine into swap, said so when it could not be weighed.

    Raises:
        DoesNotFitError: the RAM side is more than the RAM free for it.
    """
    if not plan.weights.n_cpu_moe or not plan.on_gpu:
        return plan
    check = probe.check(plan)
    if check.fits is False:
        n = plan.weights.n_cpu_moe
        short = (check.side.total or 0) - (check.usable or 0)
        raise DoesNotFitError(
            f"the experts of {n} blocks in system RAM would push this machine into swap: "
            f"{check.words()}",
            hint="Keep fewer blocks' experts in RAM (a smaller --n-cpu-moe), close programs "
            "that hold RAM, or pick a smaller quant.",
            short_by=short,
        )
    return replace(plan, ram=check, warnings=(*plan.warnings, *_unknown(check)))


def _unknown(check: RamCheck) -> tuple[str, ...]:
    why = check.unknown_reason()
    return () if why is None else (f"The RAM check could not be made: {why}. {check.words()}.",)


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
    probe: RamProbe,
) -> Plan:
    """Rung 1, else rung 2 with the smallest N that serves the workload (if its RAM side fits
    the RAM free for it), else rung 3 (whose ``rung`` then says why, when system RAM could not
    hold the experts).

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
    check = probe.check(plan)
    layers = "1 layer" if n == 1 else f"{n} layers"
    if check.fits is False:
        note = (
            f"The experts of {layers} in system RAM would give {_gives(plan)}, but would push "
            f"this machine into swap ({check.words()}): whole layers go off the card instead."
        )
        if plain is None:
            assert failure is not None
            raise DoesNotFitError(failure.message, hint=note, short_by=failure.short_by)
        return replace(plain, warnings=(note, *plain.warnings), rung=note)
    share = ram_share(plan.weights, 0)
    why = (
        f"{_plain_words(plain)}; experts of {layers} in RAM "
        f"({format_bytes(share.experts)}) give {_gives(plan)}"
    )
    return replace(plan, rung=why, ram=check, warnings=(*plan.warnings, *_unknown(check)))
