"""The server panel's line for the launch proof and a heal (the serve session's events)."""

from __future__ import annotations

from typing import Any

from homelab.serve import events as ev
from homelab.units import format_bytes


def heal_note(event: Any) -> str | None:
    """What the panel says of a ``Proved``, ``Healing``, ``Healed`` or ``PromptCacheOff``
    event; None otherwise."""
    if isinstance(event, ev.Healing):
        return (
            f"out of memory at {event.stage}: {event.said}\n"
            f"restarting smaller ({event.step}/{event.max_steps}): "
            f"{event.was.describe()} → {event.now.describe()}"
        )
    if isinstance(event, ev.Healed):
        failed = ", ".join(s.describe() for s in event.failed)
        kept = "recorded for the next plan" if event.recorded else "not recorded"
        return f"healed: {event.worked.describe()} holds ({failed} ran out of memory); {kept}"
    if isinstance(event, ev.PromptCacheOff):
        return f"the engine's prompt cache ran out of memory and is off: {event.said}"
    if isinstance(event, ev.Proved):
        r = event.result
        seen = f"peak {format_bytes(r.peak_bytes)} (plan {format_bytes(r.predicted_bytes)})"
        if r.ok:
            return f"proved: {r.prompt_tokens:,} tokens in one slot in {r.seconds:.1f} s; {seen}"
        return f"the launch proof failed: {r.oom or r.error}; {seen}"
    return None
