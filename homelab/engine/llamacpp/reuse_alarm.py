"""The prompt-cache alarm: a turn re-processed most of its prompt on a known conversation.

llama-server reuses the KV cells of a prompt's common prefix with what a slot already
holds; an agent whose prompt changes early (a timestamp in the system prompt, tools
reordered, a context shift) makes every turn re-process the whole conversation, which
is slow and easy to miss. :class:`ReuseWatch` reads the engine status poller's
:class:`LiveStatus` readings in order.

The rule, stated: alarm when, in a window that processed a prompt, at least
:data:`MIN_TOKENS` prompt tokens were processed and they were more than :data:`SHARE`
of that window's prompt tokens (processed + reused from the cache), although the slots
held at least :data:`MIN_TOKENS` tokens the last time they were all idle (a conversation
was in the cache before the turn). A first turn on an empty cache never alarms. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.engine.llamacpp.client import LiveStatus

SHARE = 0.5
MIN_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class Reprocessed:
    """A window whose prompt was mostly processed again."""

    processed: int
    cached: int
    held_before: int
    """KV cells the slots held the last time they were all idle before the window."""

    @property
    def share(self) -> float:
        return self.processed / (self.processed + self.cached)


class ReuseWatch:
    """Feed it every status in order; :meth:`update` answers that status's alarm."""

    def __init__(self) -> None:
        self.held_idle = 0
        """KV cells held when no slot was processing, at the latest such reading."""

    def update(self, status: LiveStatus) -> Reprocessed | None:
        alarm = None
        reuse = status.window.cache_reuse if status.window is not None else None
        if reuse is not None:
            cached, processed = reuse
            if (
                processed >= MIN_TOKENS
                and processed > SHARE * (processed + cached)
                and self.held_idle >= MIN_TOKENS
            ):
                alarm = Reprocessed(processed, cached, self.held_idle)
        slots = status.slots
        if slots is not None and not any(s.is_processing for s in slots):
            self.held_idle = sum(s.tokens for s in slots)
        return alarm
