"""Which quant to pick: the ranking a person running an agent wants, and each quant's rung.

Every quant is planned on the card through the offload ladder (:mod:`homelab.plan.experts_rung`):
whole on the card; else, for a MoE model, the routed experts of the first N layers in system
RAM (attention and KV stay on the card); else whole layers off the card (``-ngl K``). The
ranking, best first, is the one a person serving an agent wants:

1. **Context × slots served.** Only a quant whose plan keeps every layer's attention and KV on
   the card (rung 1 or 2) and gives every slot asked for (``--parallel N``, else one) the
   workload's whole conversation is ranked at all. More slots of a smaller quant do not rank
   it higher: the slots a person needs are the ones asked for.
2. **Quality**: the bit width the quant's name says (``Q8_0`` 8 > ``Q6_K`` 6 > ``Q5_K_M`` 5 >
   ``Q4_K_M`` = ``IQ4_XS`` 4 > ``Q3_K_M`` > ``Q2_K``; the header's bits per weight where the
   name says none). So a Q4 that needs experts in RAM beats a Q2 that fits whole.
3. **The speed cost of experts in RAM**: within one bit width, the fewer routed-expert bytes
   kept in RAM (decode reads the active ones from there every token) first; whole on the card
   before any.
4. Then the larger file (``Q4_K_M`` before ``Q4_K_S``: fewer bits thrown away).

A quant with whole layers off the card (rung 3) is never ranked: it runs several times
slower and it is shown so, with why (e.g. its experts would not fit in free RAM).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from homelab.plan.placement import RamShare, ram_share
from homelab.plan.vocabulary import slots_by_tokens
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.judge import Fit
    from homelab.plan.planner import Plan
    from homelab.serve.quant_fit import QuantFit

RungKind = Literal["card", "experts", "layers", "cpu"]
"""Whole on the card; experts of some layers in RAM; whole layers off the card; no card."""


@dataclass(frozen=True, slots=True)
class Rung:
    """Where a plan puts the weights, in words a table shows, and its RAM side."""

    kind: RungKind
    words: str
    """``whole on card``, ``experts of 14 layers in RAM``, ``-ngl 30``, ``system RAM``."""
    n_cpu_moe: int
    n_gpu_layers: int | None
    ram: RamShare | None
    """What stays in system RAM beside the card (None for a plan without a card)."""


def rung_of(plan: Plan) -> Rung:
    """The rung ``plan`` stands on."""
    weights = plan.weights
    n = weights.n_cpu_moe
    if not plan.on_gpu:
        return Rung("cpu", "system RAM (no card)", 0, None, None)
    n_blocks = len(weights.per_block)
    first = 0 if plan.n_gpu_layers is None else n_blocks - (plan.n_gpu_layers - 1)
    ram = ram_share(weights, first)
    experts = f"experts of {'1 layer' if n == 1 else f'{n} layers'} in RAM" if n else ""
    if plan.n_gpu_layers is not None:
        words = f"-ngl {plan.n_gpu_layers}" + (f", {experts}" if experts else "")
        return Rung("layers", words, n, plan.n_gpu_layers, ram)
    if n:
        return Rung("experts", experts, n, None, ram)
    return Rung("card", "whole on card", 0, None, ram)


def _serves(fit: Fit) -> bool:
    """Every layer on the card and every slot asked for holding a whole conversation."""
    plan = fit.plan
    return (
        plan is not None
        and fit.verdict == "fits"
        and rung_of(plan).kind in ("card", "experts")
        and fit.full_slots >= 1
    )


def _experts_in_ram(quant: QuantFit) -> int:
    plan = quant.fit.plan
    ram = rung_of(plan).ram if plan is not None else None
    return ram.experts if ram is not None else 0


def ranked(fits: list[QuantFit]) -> list[QuantFit]:
    """The quants that serve the workload, best first (the module's order); the rest left out."""
    return sorted(
        (f for f in fits if _serves(f.fit)),
        key=lambda f: (-(f.bits or 0), _experts_in_ram(f), -(f.size or 0), f.label),
    )


def pick_best(fits: list[QuantFit]) -> QuantFit | None:
    """The first of :func:`ranked`; None when no quant serves the workload on the card."""
    order = ranked(fits)
    return order[0] if order else None


def explain(fits: list[QuantFit], best: QuantFit | None, workload_name: str) -> str:
    """One sentence: why ``best`` (and not the next larger quant), or why there is none."""
    if best is None:
        fitting = [f for f in fits if f.fit.plan is not None and f.fit.verdict == "fits"]
        if fitting:
            most = max(fitting, key=lambda f: f.fit.ctx_per_slot or 0)
            return (
                f"No quant fits with a whole conversation of the {workload_name} workload "
                f"({most.fit.wanted_per_slot:,} tokens); the most is {most.label}'s "
                f"{most.fit.ctx_per_slot:,} tokens per slot."
            )
        return f"No quant fits on this card for the {workload_name} workload."
    order = ranked(fits)
    per_slot = best.fit.ctx_per_slot  # known: a quant that serves has a plan
    gives = f"({slots_by_tokens(best.fit.full_slots, per_slot)})" if per_slot is not None else ""
    wider_than_best = [f for f in order if (f.size or 0) > (best.size or 0)]
    if wider_than_best:
        other = wider_than_best[0]
        why = (
            f"{best.label} serves whole conversations of the {workload_name} workload {gives} "
            f"on the card; {other.label} is as wide ({other.bits}-bit) and larger but keeps "
            f"{_ram_words(other)}, which slows every token"
        )
    else:
        why = (
            f"{best.label} is the largest quant that fits with whole conversations of the "
            f"{workload_name} workload {gives}"
        )
    if _experts_in_ram(best):
        why += f", with {_ram_words(best)}"
        whole = [f for f in order if not _experts_in_ram(f)]
        if whole:
            why += (
                f": at {best.bits} bits it ranks above {whole[0].label} ({whole[0].bits}-bit), "
                "which fits whole on the card"
            )
    bigger = sorted(
        (f for f in fits if (f.size or 0) > (best.size or 0) and f not in order),
        key=lambda f: f.size or 0,
    )
    if not bigger:
        return why + ("; it is the largest quant in the repo." if not wider_than_best else ".")
    return f"{why}; the next larger, {bigger[0].label}, {_shortfall(bigger[0].fit)}."


def _ram_words(quant: QuantFit) -> str:
    plan = quant.fit.plan
    assert plan is not None
    rung = rung_of(plan)
    experts = rung.ram.experts if rung.ram is not None else 0
    return f"the {rung.words.removesuffix(' in RAM')} in RAM ({format_bytes(experts)})"


def _shortfall(fit: Fit) -> str:
    if fit.verdict == "fits":
        return f"fits only {fit.ctx_per_slot:,} of the {fit.wanted_per_slot:,} tokens a conversation needs"
    if fit.verdict == "partial":
        return "does not fit on the card (layers would run on the CPU)"
    if fit.verdict == "does_not_fit":
        return "does not fit"
    return f"could not be judged ({fit.reason})"
