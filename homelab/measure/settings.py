"""What a bench is asked to do: ``BenchSettings``, checked, with the engine-derived defaults."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from homelab.errors import UsageError
from homelab.measure.shapes import Workload, agent_turn_tokens, largest_prompt

DEFAULT_MAX_TOKENS = 32
DEFAULT_TURNS = 3
DEFAULT_TIME_LIMIT_S = 300.0
MAX_DEFAULT_PROMPT_TOKENS = 1024
"""The default prompt when none is asked: as long as one slot holds, up to this."""
MAX_DEFAULT_LEVELS = 6
"""Default levels: 1, 2, 4, … up to the engine's slots, at most this many."""


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """One bench. None: chosen from the engine (prompt size from its slot's context, the
    levels from its slot count)."""

    engine_url: str
    gate_url: str | None = None
    api_key: str | None = None
    """The gate's key, when it checks one."""
    engine_key: str | None = field(default=None, repr=False)
    """The engine's own key (homelab's engine behind its gate has one), for the calls to
    ``engine_url``; None: it has none."""
    workload: Workload = Workload.AGENT
    prompt_tokens: int | None = None
    """Independent prompts: tokens each; agent sessions: the shared system prompt's."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    concurrency: tuple[int, ...] | None = None
    turns: int = DEFAULT_TURNS
    """Requests each client sends in a level (an agent session's turns)."""
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    warmup: bool = True
    metrics_interval_s: float = 0.5

    def check(self) -> None:
        """Raises UsageError naming the setting that cannot be."""
        if self.prompt_tokens is not None and self.prompt_tokens < 1:
            raise UsageError(f"`prompt_tokens` must be at least 1, not {self.prompt_tokens}")
        if self.max_tokens < 1:
            raise UsageError(f"`max_tokens` must be at least 1, not {self.max_tokens}")
        if self.turns < 1:
            raise UsageError(f"`turns` must be at least 1, not {self.turns}")
        if not self.time_limit_s > 0:
            raise UsageError(f"`time_limit` must be positive, not {self.time_limit_s}")
        if self.concurrency is not None:
            if not self.concurrency or any(c < 1 for c in self.concurrency):
                raise UsageError(
                    f"`concurrency` must list levels of at least 1, not {list(self.concurrency)}"
                )

    def for_engine(self, slots: int | None, ctx_per_slot: int | None) -> BenchSettings:
        """These settings with the engine-derived defaults filled in, checked against one
        slot's context.

        Raises:
            UsageError: the longest request would not fit one slot.
        """
        concurrency = self.concurrency or default_levels(slots)
        prompt = self.prompt_tokens
        if prompt is None:
            prompt = default_prompt_tokens(self.workload, self.max_tokens, self.turns, ctx_per_slot)
        chosen = replace(self, prompt_tokens=prompt, concurrency=tuple(sorted(set(concurrency))))
        need = largest_prompt(self.workload, prompt, self.max_tokens, self.turns)
        if ctx_per_slot is not None and need > ctx_per_slot:
            what = (
                f"{self.turns} turn(s) of {agent_turn_tokens(prompt)} tokens on a "
                f"{prompt}-token system prompt"
                if self.workload is Workload.AGENT
                else f"a {prompt}-token prompt"
            )
            raise UsageError(
                f"{what} with {self.max_tokens}-token replies needs about {need:,} tokens of "
                f"context, and one slot of this engine holds {ctx_per_slot:,}",
                hint="Lower `prompt_tokens`, `turns` or `max_tokens`, or serve with more "
                "context per slot (`ctx`, fewer `slots`).",
            )
        return chosen


def default_levels(slots: int | None) -> tuple[int, ...]:
    """1, 2, 4, … up to ``slots`` (and ``slots`` itself); 1, 2, 4 when unknown."""
    top = slots if slots and slots > 0 else 4
    levels = [1]
    while levels[-1] * 2 <= top and len(levels) < MAX_DEFAULT_LEVELS:
        levels.append(levels[-1] * 2)
    if levels[-1] != top and len(levels) < MAX_DEFAULT_LEVELS:
        levels.append(top)
    return tuple(levels)


def default_prompt_tokens(
    workload: Workload, max_tokens: int, turns: int, ctx_per_slot: int | None
) -> int:
    """The longest prompt (up to ``MAX_DEFAULT_PROMPT_TOKENS``) one slot's context holds
    with the workload's turns and replies (at least 16)."""
    best = MAX_DEFAULT_PROMPT_TOKENS
    if ctx_per_slot is None:
        return best
    while best > 16 and largest_prompt(workload, best, max_tokens, turns) > ctx_per_slot:
        best = best * 3 // 4
    return max(best, 16)
