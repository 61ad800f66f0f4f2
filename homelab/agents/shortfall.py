"""When one request has less context than an agent accepts: say so, and offer the plan that
gives it enough.

Two remedies, both computed rather than guessed: the plan ``homelab serve MODEL --for
AGENT`` would make (the real planner, the served model, the card as it is now with this
engine's own memory counted as freed: :func:`plan_offer`), and, for split slots, the
``--parallel`` that gives each slot the agent's minimum out of the same ``-c``
(:func:`parallel_that_fits`). A unified pool only grows with ``-c``.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.agents.limits import agent_limit
from homelab.agents.target import AgentTarget
from homelab.engine.kinds import engine_kind
from homelab.engine.supervision.facts import PlanFacts
from homelab.errors import HomelabError
from homelab.plan.card import card_for
from homelab.plan.options import PlanOptions
from homelab.plan.own_engine import without_own_engines


@dataclass(frozen=True, slots=True)
class Offer:
    """A plan made for the agent: its slots and what one request gets there."""

    slots: int
    ctx_per_slot: int
    ctx_total: int
    command: str
    """How to serve it (``homelab serve MODEL --for claude --replace``)."""

    def describe(self) -> str:
        return f"{self.slots} × {self.ctx_per_slot:,}"


@dataclass(frozen=True, slots=True)
class Shortfall:
    """One request's context is below what ``agent`` accepts."""

    agent: str
    title: str
    tokens: int
    """What one request gets now."""
    minimum: int
    """What the agent accepts (:mod:`homelab.agents.limits`)."""
    parallel: int | None = None
    """The ``--parallel`` that gives each slot ``minimum`` from the same ``-c``; None: none."""
    offer: Offer | None = None
    offer_note: str | None = None
    """Why there is no offer, or why even the offer falls short."""

    def line(self) -> str:
        """The offer in one line (the warning before it said what is short)."""
        parts = []
        if self.offer is not None and self.offer.ctx_per_slot >= self.minimum:
            parts.append(f"re-plan as {self.offer.describe()}? `{self.offer.command}`")
        if self.parallel is not None:
            parts.append(f"or serve with --parallel {self.parallel}")
        if self.offer_note is not None:
            parts.append(self.offer_note)
        if not parts:
            return f"{self.title} needs {self.minimum:,} tokens per request; none fits here"
        return "; ".join(parts)

    def to_json(self) -> dict[str, object]:
        offer = self.offer
        return {
            "tokens": self.tokens,
            "minimum": self.minimum,
            "parallel": self.parallel,
            "offer": None
            if offer is None
            else {
                "slots": offer.slots,
                "ctx_per_slot": offer.ctx_per_slot,
                "ctx_total": offer.ctx_total,
                "command": offer.command,
            },
            "note": self.offer_note,
            "line": self.line(),
        }


def minimum_missed(agent: str, target: AgentTarget) -> int | None:
    """The agent's minimum when ``target``'s requests hold less; None when it accepts them."""
    limit = agent_limit(agent)
    if limit.accepts(target.context_tokens):
        return None
    return limit.minimum_tokens


def parallel_that_fits(facts: PlanFacts, minimum: int) -> int | None:
    """Slots of at least ``minimum`` tokens each in the same ``-c`` (split slots only, fewer
    than now); None when not even one, or on a unified pool."""
    if facts.unified:
        return None
    slots = facts.ctx_total // minimum
    return slots if 1 <= slots < facts.slots else None


def plan_offer(
    agent: str, title: str, model: str, engine: str, options: PlanOptions
) -> tuple[Offer | None, str | None]:
    """What ``homelab serve MODEL --for AGENT`` would plan for ``model`` now.

    ``options`` name the card and carry the agent's workload; the card is read as it is
    now with homelab's own running engines counted as freed (the re-plan replaces them).

    Returns:
        (the offer, None), (the offer, why it still falls short) or (None, why none).
    """
    minimum = agent_limit(agent).minimum_tokens
    command = f"homelab serve {model} --for {agent} --replace"
    try:
        card = without_own_engines(card_for(options))
        plan = engine_kind(engine).plan(model, card, options)
    except HomelabError as error:
        return None, f"re-plan with `{command}` ({error.message})"
    facts = plan.facts
    offer = Offer(facts.slots, facts.ctx_per_slot, facts.ctx_total, command)
    if minimum is not None and facts.ctx_per_slot < minimum:
        return offer, (
            f"even planned for {title}, one request gets at most {facts.ctx_per_slot:,} "
            "tokens with this model here: serve a model with a longer context"
        )
    return offer, None


def shortfall(
    agent: str,
    title: str,
    target: AgentTarget,
    facts: PlanFacts | None,
    offer: tuple[Offer | None, str | None] = (None, None),
) -> Shortfall | None:
    """The shortfall of ``target`` for ``agent`` with its remedies; None when it accepts."""
    minimum = minimum_missed(agent, target)
    if minimum is None:
        return None
    parallel = parallel_that_fits(facts, minimum) if facts is not None else None
    plan, note = offer
    return Shortfall(agent, title, target.context_tokens, minimum, parallel, plan, note)
