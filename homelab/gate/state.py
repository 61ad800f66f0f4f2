"""``GateState``: one frozen look at a gate (what ``status`` and the TUI show)."""

from __future__ import annotations

from dataclasses import dataclass, field

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

    def to_json(self) -> dict[str, object]:
        return {
            "at": self.at,
            "conversation": self.conversation,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "slot": self.slot,
        }

    def describe(self) -> str:
        share = 0 if self.prompt_tokens == 0 else 100 * self.cached_tokens // self.prompt_tokens
        where = "" if self.slot is None else f" on slot {self.slot}"
        return (
            f"conversation {self.conversation}{where} re-processed its prompt: "
            f"{self.cached_tokens} of {self.prompt_tokens} tokens from cache ({share} %)"
        )


@dataclass(frozen=True, slots=True)
class GateState:
    """The gate's numbers at one moment. None: not known yet (the engine has not said)."""

    url: str | None
    engine_url: str
    budget_tokens: int | None
    """Tokens admitted at once."""
    ceiling_tokens: int | None
    """The most one request may be charged (prompt + completion cap)."""
    max_concurrent: int | None
    charged_tokens: int
    running: int
    queued: int
    admitted: int
    refused: dict[str, int] = field(default_factory=dict)
    """Refusals by reason: queue_full, timeout, too_large, client_gone."""
    cache_hit_rate: float | None = None
    """Prompt tokens reused from the engine's cache over prompt tokens, since start."""
    alarms: tuple[ReprefillAlarm, ...] = ()
    """The latest re-prefill alarms, oldest first."""
    upstream_errors: int = 0

    def to_json(self) -> dict[str, object]:
        """The state as JSON values (``status --json``)."""
        return {
            "url": self.url,
            "engine_url": self.engine_url,
            "budget_tokens": self.budget_tokens,
            "ceiling_tokens": self.ceiling_tokens,
            "max_concurrent": self.max_concurrent,
            "charged_tokens": self.charged_tokens,
            "running": self.running,
            "queued": self.queued,
            "admitted": self.admitted,
            "refused": dict(self.refused),
            "cache_hit_rate": self.cache_hit_rate,
            "alarms": [alarm.to_json() for alarm in self.alarms],
            "upstream_errors": self.upstream_errors,
        }
