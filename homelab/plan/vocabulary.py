"""The words every front-end uses for a plan's figures: one vocabulary for the TUI and the CLI.

- **allocated**: the tokens the plan gives llama-server (``-c``): slots × tokens per slot.
  Each slot holds at most the context the model was trained on (the *trained cap*).
- **fit**: the most tokens of context the memory would hold at that many slots (what a
  longer ``-c`` could have).
- **free**: what the driver reports free on the card now (``homelab gpu``).
- **usable after headroom**: what is llama-server's to use: the card less the driver's
  reserve, the desktop, other programs and the headroom kept for them.
- **spare after the plan**: what is left of the usable once the plan's weights, engine
  state and KV are in.

Sizes are written by :func:`homelab.units.format_bytes` alone, at its one precision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from homelab.plan.kv import CTX_PAD

if TYPE_CHECKING:
    from homelab.plan.judge import Verdict
    from homelab.plan.planner import Plan

VERDICT_WORDS: dict[Verdict, str] = {
    "fits": "fits",
    "partial": "partial",
    "does_not_fit": "does not fit",
    "unknown": "unknown",
}
"""A verdict in a word or three, as ``homelab presets``, ``homelab quants`` and the TUI's
quant chooser word it (one table, so no front-end words one differently)."""

ALLOCATED = "allocated"
"""The tokens a plan gives llama-server (slots × tokens per slot)."""
FIT = "fit"
"""The most tokens the memory would hold at the plan's slots."""
FREE = "free"
"""What the driver reports free now."""
USABLE = "usable after headroom"
"""What is llama-server's to use."""
SPARE = "spare after the plan"
"""The usable less what the plan takes."""
TRAINED_CAP = "trained cap"
"""Each slot is capped at the model's trained context."""


def slot_count(slots: int) -> str:
    """``1 slot`` / ``32 slots``."""
    return f"{slots:,} slot{'' if slots == 1 else 's'}"


def slots_by_tokens(slots: int, per_slot: int) -> str:
    """``1 slot × 8,192 tokens`` / ``32 slots × 8,192 tokens``."""
    return f"{slot_count(slots)} × {per_slot:,} tokens"


def capped_at_trained(plan: Plan) -> bool:
    """Whether each slot holds the model's whole trained context and no more: a longer
    context per slot would not be used (llama-server caps a request there)."""
    trained = plan.geometry.trained_ctx
    if not trained:
        return False
    return plan.candidate.allocation.ctx_per_slot >= trained // CTX_PAD * CTX_PAD


def cap_note(plan: Plan) -> str:
    """`` (each capped at the 8,192 tokens it was trained on)``, or ``""`` when not capped."""
    if not capped_at_trained(plan):
        return ""
    return f" (each capped at the {plan.geometry.trained_ctx:,} tokens it was trained on)"


def allocated_words(plan: Plan) -> str:
    """``32 slots × 8,192 tokens allocated (each capped at the 8,192 tokens it was trained
    on)``: what the plan gives, and the cap when the trained context sets it."""
    alloc = plan.candidate.allocation
    return f"{slots_by_tokens(plan.settings.n_seq, alloc.ctx_per_slot)} {ALLOCATED}{cap_note(plan)}"


def fit_words(plan: Plan) -> str:
    """``1,353,984 tokens fit``: the most the memory would hold at the plan's slots."""
    return f"{plan.tokens_fit:,} tokens {FIT}"


def summary_words(plan: Plan) -> str:
    """``1 slot × 8,192 tokens allocated (…), 1,353,984 tokens fit``: both figures, named."""
    return f"{allocated_words(plan)}, {fit_words(plan)}"
