"""``GateState``: one frozen look at a gate (what ``status`` and the TUI show)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from homelab.gate.admission import Refusal

STATE_PATH = "/homelab/gate"
"""Where a gate serves its own state as JSON (:meth:`GateState.to_json`)."""


@dataclass(frozen=True, slots=True)
class ReprefillAlarm:
    """A turn of a known conversation that re-processed most of its prompt."""

    at: float
    """Wall-clock time (``time.time()``)."""
    conversation: str
    """A short hash of the conversation's first messages."""
    prompt_tokens: int
    cached_tokens: int
    slot: int | None

    def describe(self) -> str:
        share = 0 if self.prompt_tokens == 0 else 100 * self.cached_tokens // self.prompt_tokens
        where = "" if self.slot is None else f" on slot {self.slot}"
        return (
            f"conversation {self.conversation}{where} re-processed its prompt: "
            f"{self.cached_tokens} of {self.prompt_tokens} tokens from cache ({share} %)"
        )


@dataclass(frozen=True, slots=True)
class GateState:
    """The gate's numbers at one moment. None: not known yet (the engine has not said);
    the defaults are a gate that has admitted nothing."""

    url: str | None
    engine_url: str
    budget_tokens: int | None = None
    """Tokens admitted at once."""
    ceiling_tokens: int | None = None
    """The most one request may be charged (prompt + completion cap)."""
    max_concurrent: int | None = None
    charged_tokens: int = 0
    running: int = 0
    queued: int = 0
    admitted: int = 0
    refused: dict[str, int] = field(default_factory=lambda: {r.value: 0 for r in Refusal})
    """Refusals by reason: queue_full, timeout, too_large, client_gone."""
    cache_hit_rate: float | None = None
    """Prompt tokens reused from the engine's cache over prompt tokens, since start."""
    alarms: tuple[ReprefillAlarm, ...] = ()
    """The latest re-prefill alarms, oldest first."""
    upstream_errors: int = 0
    models: tuple[dict[str, object], ...] = ()
    """A gate in front of a set of models: each model (id, aliases, state, in flight,
    waiting, swaps, failure), in the set's order; empty for a gate of one engine."""

    def to_json(self) -> dict[str, object]:
        """The state as JSON values (``status --json``): every field, the alarms a list."""
        return {
            **asdict(self),
            "alarms": [asdict(alarm) for alarm in self.alarms],
            "models": [dict(model) for model in self.models],
        }
