"""The prompt-cache alarm: a turn re-processed most of its prompt on a known conversation.

llama-server reuses the KV cells of a prompt's common prefix with what a slot already
holds; an agent whose prompt changes early (a timestamp in the system prompt, tools
reordered, a context shift) makes every turn re-process the whole conversation, which
is slow and easy to miss. From two consecutive :class:`LiveStatus` readings:

The rule, stated: alarm when, in the latest window that processed a prompt, at least
:data:`MIN_TOKENS` prompt tokens were processed and they were more than
:data:`SHARE` of that window's prompt tokens (processed + reused from the cache),
although the slots already held at least :data:`MIN_TOKENS` tokens before it (a
conversation was in the cache). A first turn on an empty cache never alarms. Pure.
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
    """KV cells the slots held before the window."""

    @property
    def share(self) -> float:
        return self.processed / (self.processed + self.cached)


def reprocessed_prompt(previous: LiveStatus | None, status: LiveStatus) -> Reprocessed | None:
    """The alarm of ``status``'s window (see the module docstring), or None."""
    window = status.window
    if previous is None or previous.kv_tokens is None or window is None:
        return None
    reuse = window.cache_reuse
    if reuse is None:
        return None
    cached, processed = reuse
    if processed < MIN_TOKENS or processed <= SHARE * (processed + cached):
        return None
    if previous.kv_tokens < MIN_TOKENS:
        return None
    return Reprocessed(processed, cached, previous.kv_tokens)
