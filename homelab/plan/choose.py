"""Picking the context and slots a plan gets, from the request and what the fitter says fits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from homelab.errors import DoesNotFitError
from homelab.gguf.geometry import Geometry
from homelab.plan.fit import Candidate, Fitter
from homelab.plan.kv import CTX_PAD, pad
from homelab.plan.vocabulary import slot_count
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.planner import PlanRequest

MIN_CTX = 4096
"""Below this a conversation is not worth serving: the plan says it does not fit."""


def choose(
    fitter: Fitter,
    request: PlanRequest,
    geometry: Geometry,
    per_slot: int,
    warnings: list[str],
) -> tuple[Candidate, int]:
    """Pick (context, slots) from the request and what fits; (candidate, tokens that fit)."""
    if request.ctx is not None:
        n_seq = request.parallel or 1
        candidate = fitter.candidate(request.ctx, n_seq)
        tokens_fit = fitter.max_ctx(n_seq)
        if not fitter.fits(request.ctx, n_seq):
            raise DoesNotFitError(
                f"a context of {request.ctx:,} tokens with {slot_count(n_seq)} needs "
                f"{format_bytes(candidate.cost)} for KV and engine state; "
                f"{format_bytes(max(fitter.room, 0))} are free for them",
                hint=f"What fits with {slot_count(n_seq)}: a context of {tokens_fit:,} tokens."
                if tokens_fit
                else "Nothing fits: try a smaller quant or cache type q4_0.",
                short_by=candidate.cost - max(fitter.room, 0),
            )
        return candidate, tokens_fit

    if request.parallel is not None:
        n_seq = request.parallel
        tokens_fit = fitter.max_ctx(n_seq)
        wanted_total = per_slot * n_seq
        n_ctx = min(wanted_total, tokens_fit)
        if n_ctx < MIN_CTX * n_seq:
            raise nothing_fits(fitter, n_seq)
        if n_ctx < wanted_total:
            warnings.append(
                f"{n_seq} slots of {per_slot:,} tokens do not fit: each slot gets {n_ctx // n_seq:,} tokens."
            )
        return fitter.candidate(n_ctx, n_seq), tokens_fit

    slots = fitter.max_slots(per_slot, max(1, request.max_slots))
    if slots == 0:
        tokens_fit = fitter.max_ctx(1, cap=per_slot)
        if tokens_fit < MIN_CTX:
            raise nothing_fits(fitter, 1)
        warnings.append(
            f"Not even one {request.workload.name} conversation of {per_slot:,} tokens fits: "
            f"one slot of {tokens_fit:,} tokens instead."
        )
        return fitter.candidate(tokens_fit, 1), tokens_fit
    return fitter.candidate(per_slot * slots, slots), fitter.max_ctx(slots)


def nothing_fits(fitter: Fitter, n_seq: int) -> DoesNotFitError:
    best = fitter.max_ctx(n_seq)
    return DoesNotFitError(
        f"with {slot_count(n_seq)} only {best:,} tokens of context fit "
        f"({format_bytes(max(fitter.room, 0))} free for KV and engine state), below the "
        f"{MIN_CTX:,}-token minimum",
        hint="Try a smaller quant, cache type q4_0, fewer slots, or close programs using the GPU.",
        short_by=fitter.candidate(MIN_CTX * n_seq, n_seq).cost - max(fitter.room, 0),
    )


def wanted_per_slot(request: PlanRequest, geometry: Geometry, warnings: list[str]) -> int:
    """Tokens each slot should hold: the workload's, capped at the trained context."""
    wanted = pad(request.workload.tokens_per_slot)
    trained_cap = geometry.trained_ctx // CTX_PAD * CTX_PAD
    if trained_cap and wanted > trained_cap:
        warnings.append(
            f"This model was trained on {geometry.trained_ctx:,} tokens: each conversation is capped there, "
            f"below the {request.workload.tokens_per_slot:,} the {request.workload.name} workload wants."
        )
        return trained_cap
    return wanted
