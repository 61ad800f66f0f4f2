"""Which rung of the offload ladder a plan stands on, and why, for ``homelab plan --json``.

The rungs (:mod:`homelab.plan.experts_rung`): ``whole`` (every tensor but the input
embedding on the card), ``experts_in_ram`` (the routed experts of the first N blocks in
system RAM, attention and KV on the card), ``layers_off`` (whole blocks on the CPU,
``-ngl K``); and ``system_ram`` for a plan with no card at all. The reason is the
ladder's own sentence when it chose the rung, else what the person asked for, else what
the numbers say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from homelab.plan.placement import EVERY_BLOCK

if TYPE_CHECKING:
    from homelab.plan.planner import Plan

RungKind = Literal["whole", "experts_in_ram", "layers_off", "system_ram"]


def rung_kind(plan: Plan) -> RungKind:
    """The rung ``plan`` stands on."""
    if not plan.on_gpu:
        return "system_ram"
    if plan.n_gpu_layers is not None:
        return "layers_off"
    return "experts_in_ram" if plan.weights.n_cpu_moe else "whole"


def _asked(plan: Plan) -> str | None:
    """The person's own experts setting, as they wrote it; None when the ladder chose."""
    n = plan.request.n_cpu_moe
    if n is None:
        return None
    return "--cpu-moe" if n == EVERY_BLOCK else f"--n-cpu-moe {n}"


def rung_why(plan: Plan) -> str:
    """Why the plan stands on its rung, in a sentence."""
    kind = rung_kind(plan)
    alloc, s = plan.candidate.allocation, plan.settings
    gives = f"{s.n_seq} × {alloc.ctx_per_slot:,} tokens"
    asked = _asked(plan)
    moe = any(plan.weights.experts_per_block)
    if kind == "system_ram":
        return f"No card to offload to: the whole model runs in system RAM ({gives})."
    if plan.rung:  # the ladder's own reason (experts in RAM, or why not)
        return plan.rung
    if asked and plan.weights.n_cpu_moe:
        n = plan.weights.n_cpu_moe
        return f"{asked} was given: the experts of {n} of {len(plan.weights.per_block)} blocks stay in system RAM ({gives})."
    if kind == "whole":
        wanted = min(plan.request.workload.tokens_per_slot, plan.geometry.trained_ctx or 1 << 62)
        if moe and asked is None and plan.request.ctx is None and alloc.ctx_per_slot < wanted:
            return (
                f"Whole on the card gives {gives}, short of the {plan.request.workload.describe()}; "
                "not even every block's experts in RAM would serve it whole."
            )
        return f"Everything fits on the card: {gives}."
    gpu_blocks = (plan.n_gpu_layers or 1) - 1
    off = f"{gpu_blocks} of {len(plan.weights.per_block)} blocks on the card, the rest on the CPU ({gives})"
    if asked is not None and moe:
        return f"{asked} was given, and the weights do not fit on the card: {off}."
    if moe:
        return f"Not even every block's experts in RAM leave room for a conversation: {off}."
    return f"The weights do not fit on the card: {off}."


def rung_dict(plan: Plan) -> dict[str, Any]:
    """``{"kind": ..., "why": ...}``: the ``rung`` of ``homelab plan --json``."""
    return {"kind": rung_kind(plan), "why": rung_why(plan)}
