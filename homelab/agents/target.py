"""What an agent is pointed at, and how much context one request can use there.

A llama.cpp engine with split slots gives each conversation its share of ``-c``
(``ctx_per_slot``): one request can never hold more. With a unified pool (``-kvu``) one
request could grow to the whole pool, but only while nobody else holds cells, so the gate
admits a request only under its ceiling (``gate_budget_tokens`` in the engine record) and
that ceiling is what an agent may plan on. Without the gate on a unified pool nothing
bounds a request but the pool, shared by every slot: a request that fits alone can then
fail with llama-server's "Context size has been exceeded" (measured in issue 9).

The output cap: the gate writes ``min(max_tokens, max_tokens_cap)`` into each request it
forwards (``max_tokens_cap`` in gate.toml, 8192 unless set: :data:`DEFAULT_MAX_OUTPUT_TOKENS`;
the engine record keeps the running gate's as ``gate_max_tokens``), so an agent is told that
cap, never the default when the gate's is lower: Claude Code told 4,096 behind a gate that
cuts answers at 64 ends its run with "response exceeded the 4096 output token maximum".
An agent is told at most half its window for output,
so that a prompt still fits beside a full answer under the same ceiling (a request is
charged prompt + output; one asking for the whole window could never be admitted).
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.engine.kinds import DEFAULT_ENGINE
from homelab.engine.supervision.facts import PlanFacts

DEFAULT_MAX_OUTPUT_TOKENS = 8192
"""The gate's cap on the tokens one request generates (``GateSettings.max_tokens_cap``)."""


@dataclass(frozen=True, slots=True)
class RequestContext:
    """The tokens one request can use, and where that number comes from (for a person)."""

    tokens: int
    source: str
    """``per-slot share of 4 × 1024`` and the like; shown beside the number."""
    shared_pool: bool = False
    """True when no ceiling bounds a request below the unified pool (no gate in front)."""
    unified: bool = False
    """The engine's slots share one KV pool (more context comes from a larger ``ctx`` only)."""

    @property
    def remedy(self) -> str:
        """The settings that give one request more context (hint words, in backquotes)."""
        return "a larger `ctx`" if self.unified else "a larger `ctx`, fewer `slots`"


def request_context(
    facts: PlanFacts, *, gated: bool, gate_budget_tokens: int | None = None
) -> RequestContext:
    """The context one request can really use on an engine planned as ``facts``.

    Args:
        facts: what the plan gave the engine (slots, per-slot context, KV cells, unified).
        gated: the gate stands in front of the engine.
        gate_budget_tokens: the gate's per-request ceiling (the engine record's
            ``gate_budget_tokens``); None when there is no gate or the record does not say.

    Returns:
        Split slots: the per-slot share (or the gate's ceiling when that is lower). A
        unified pool: the gate's ceiling; without one, the per-sequence context (the
        whole pool), flagged ``shared_pool`` so the caller warns.
    """
    slots = facts.slots
    pool = facts.ctx_per_slot
    if not facts.unified:
        share = f"per-slot share: {slots} slot{'s' if slots != 1 else ''} × {pool:,} tokens"
        if gated and gate_budget_tokens is not None and gate_budget_tokens < pool:
            return RequestContext(gate_budget_tokens, f"the gate's ceiling ({share})")
        return RequestContext(pool, share)
    if gated and gate_budget_tokens is not None:
        tokens = min(gate_budget_tokens, pool)
        return RequestContext(
            tokens,
            f"the gate's ceiling on a unified pool of {facts.kv_tokens:,} tokens",
            unified=True,
        )
    return RequestContext(
        pool,
        f"a unified pool of {facts.kv_tokens:,} tokens shared by {slots} "
        f"slot{'s' if slots != 1 else ''}, no ceiling in front",
        shared_pool=True,
        unified=True,
    )


def output_tokens(context_tokens: int, cap: int = DEFAULT_MAX_OUTPUT_TOKENS) -> int:
    """The most tokens an agent should ask one answer for: the gate's cap, never more than
    half the window (see the module docstring)."""
    return max(1, min(cap, context_tokens // 2))


def planned_output_tokens(context_tokens: int) -> int:
    """The answer bound the plan leaves room for under homelab's default cap (what a gate
    cap below it takes away)."""
    return output_tokens(context_tokens)


@dataclass(frozen=True, slots=True)
class AgentTarget:
    """Where an agent sends its requests and what one request can hold there."""

    base_url: str
    """The gate (or the engine with ``--no-gate``), without ``/v1``: ``http://127.0.0.1:8080``."""
    model: str
    """The model id the server reports in ``/v1/models``."""
    context: RequestContext
    """The tokens one request can use (prompt and answer together)."""
    max_output_tokens: int
    """The most tokens one answer may ask for (:func:`output_tokens`)."""
    api_key: str | None = None
    """The gate's key when it has one; None: the server checks none."""
    gated: bool = True
    """True when ``base_url`` is the gate."""
    engine: str = DEFAULT_ENGINE
    """The engine kind's name."""
    gate_max_tokens: int | None = None
    """The gate's ``max_tokens_cap`` (the most one answer generates there); None: no gate,
    or a record that does not say (the default was assumed)."""
    small_model: str | None = None
    """A set's small model (Claude Code's small-fast one); None: the same model serves all."""
    fim_model: str | None = None
    """A set's autocomplete (FIM) model; None: there is none."""
    fim_context_tokens: int | None = None
    """The tokens one request to the FIM model holds; None: not known."""

    @property
    def context_tokens(self) -> int:
        return self.context.tokens

    @property
    def openai_base(self) -> str:
        """The OpenAI-style base URL (``…/v1``)."""
        return f"{self.base_url.rstrip('/')}/v1"

    @property
    def input_tokens(self) -> int:
        """The most prompt tokens that still leave room for a full answer."""
        return max(self.context_tokens - self.max_output_tokens, 0)

    def describe(self) -> str:
        """``http://127.0.0.1:8080 (gate) · SmolLM2 · 1,024 tokens per request (per-slot …)``."""
        where = "gate" if self.gated else "engine, no gate"
        return (
            f"{self.base_url} ({where}) · {self.model} · {self.context_tokens:,} tokens per "
            f"request ({self.context.source}) · answers up to {self.max_output_tokens:,}"
            + (f" · small model {self.small_model}" if self.small_model else "")
            + (f" · autocomplete {self.fim_model}" if self.fim_model else "")
        )


def target_for(
    facts: PlanFacts,
    *,
    base_url: str,
    model: str,
    gated: bool,
    gate_budget_tokens: int | None = None,
    api_key: str | None = None,
    engine: str = DEFAULT_ENGINE,
    gate_max_tokens: int | None = None,
) -> AgentTarget:
    """The target of an engine planned as ``facts`` (see :func:`request_context`);
    ``gate_max_tokens`` is the gate's ``max_tokens_cap`` (None: unknown, the default)."""
    context = request_context(facts, gated=gated, gate_budget_tokens=gate_budget_tokens)
    cap = gate_max_tokens if gated and gate_max_tokens is not None else DEFAULT_MAX_OUTPUT_TOKENS
    return AgentTarget(
        base_url=base_url.rstrip("/"),
        model=model,
        context=context,
        max_output_tokens=output_tokens(context.tokens, cap),
        api_key=api_key,
        gated=gated,
        engine=engine,
        gate_max_tokens=gate_max_tokens if gated else None,
    )
