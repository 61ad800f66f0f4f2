"""The numbers the gate admits by, resolved from its settings and the engine's facts.

- **budget**: tokens admitted at once. A unified KV pool (``-kvu``) is shared by every
  slot, so the budget is the cells the engine allocated with a margin (× 0.85); split slots
  each own ``ctx_per_slot`` cells, so the budget is their sum.
- **ceiling**: the most one request may be charged (prompt + completion cap): the budget for
  a unified pool, one slot's context for split slots. A request over it is refused at once.
- **max_concurrent**: requests running at once, the engine's slots by default, so
  llama-server never defers a task of ours.

The engine's facts come from the plan (:class:`PlanFacts`) or, without a plan, from
``/props``: each slot's ``n_ctx`` and ``total_slots``. ``/props`` does not say whether the
pool is unified; with ``-kvu`` every slot reports the whole pool, so the gate reads the
answer as a unified pool of ``n_ctx`` cells (safe either way: a split engine is then
admitted less than it could hold, never more).
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.engine.llamacpp.answers import ServerProps
from homelab.engine.supervision.facts import PlanFacts
from homelab.gate.settings import GateSettings

UNIFIED_MARGIN = 0.85
"""Share of a unified pool the gate admits (the seed article's "~85 % of GPU KV cache")."""


@dataclass(frozen=True, slots=True)
class Limits:
    budget_tokens: int
    ceiling_tokens: int
    max_concurrent: int
    slots: int | None
    """The engine's slots (None: not known)."""
    source: str
    """Where the numbers came from: "settings", "plan" or "engine"."""


def resolve_limits(
    settings: GateSettings, facts: PlanFacts | None, props: ServerProps | None
) -> Limits | None:
    """The limits, or None when neither the settings nor the engine say enough yet."""
    slots: int | None
    if facts is not None:
        slots = facts.slots
        if facts.unified:
            budget: int | None = int(facts.kv_tokens * UNIFIED_MARGIN)
            ceiling: int | None = budget
        else:
            budget, ceiling = facts.ctx_per_slot * facts.slots, facts.ctx_per_slot
        source = "plan"
    elif props is not None and props.n_ctx_per_slot is not None:
        slots = props.total_slots
        budget = ceiling = int(props.n_ctx_per_slot * UNIFIED_MARGIN)
        source = "engine"
    else:
        slots, budget, ceiling, source = None, None, None, "settings"
    if settings.token_budget is not None:
        budget = settings.token_budget
        ceiling = budget if ceiling is None else min(ceiling, budget)
        source = "settings" if facts is None and props is None else source
    max_concurrent = settings.max_concurrent if settings.max_concurrent is not None else slots
    if budget is None or ceiling is None or max_concurrent is None:
        return None
    return Limits(
        budget_tokens=max(1, budget),
        ceiling_tokens=max(1, ceiling),
        max_concurrent=max(1, max_concurrent),
        slots=slots,
        source=source,
    )
