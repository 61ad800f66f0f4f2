"""``homelab serve``'s launch proof and heal: the flags, and the lines their events print."""

from __future__ import annotations

import argparse
from dataclasses import replace


def add_prove_arguments(serve: argparse.ArgumentParser) -> None:
    """``--prove/--no-prove`` (``serve`` only)."""
    serve.add_argument(
        "--prove",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after ready, fill the largest slot once and watch memory before announcing it; "
        "an out-of-memory restarts on a smaller plan (default: on for a GPU plan, off for CPU)",
    )


def prove_options(args: argparse.Namespace, options):
    """``options`` with ``--prove/--no-prove`` applied."""
    return replace(options, prove=getattr(args, "prove", None))


def print_prove_event(event) -> bool:
    """Print a proof or heal event; False when ``event`` is neither."""
    from homelab.serve import events as ev
    from homelab.units import format_bytes

    if isinstance(event, ev.Proving):
        print(
            f"proving the plan: slot {event.slot} filled with {event.prompt_tokens:,} of its "
            f"{event.ctx_per_slot:,} tokens...",
            flush=True,
        )
    elif isinstance(event, ev.Proved):
        r = event.result
        where = "the card's used memory" if r.memory_source == "card" else "the engine's RSS"
        seen = (
            f"{where} {format_bytes(r.before_bytes)} → peak {format_bytes(r.peak_bytes)}"
            f" (plan: {format_bytes(r.predicted_bytes)})"
        )
        if r.ok:
            print(f"proved in {r.seconds:.1f} s: {r.prompt_tokens:,} tokens; {seen}", flush=True)
        else:
            print(f"the proof failed after {r.seconds:.1f} s: {r.oom or r.error}; {seen}")
    elif isinstance(event, ev.Healing):
        print(
            f"out of memory ({event.stage}): {event.said}\n"
            f"  healing {event.step}/{event.max_steps}: {event.was.describe()} → "
            f"{event.now.describe()}; restarting on the smaller plan",
            flush=True,
        )
        if event.argv:
            print("  " + " ".join(event.argv))
    elif isinstance(event, ev.PromptCacheOff):
        print(
            "the engine's prompt cache ran out of memory and is off (it serves on without "
            f"it; nothing restarts): {event.said}",
            flush=True,
        )
    elif isinstance(event, ev.Healed):
        failed = ", ".join(s.describe() for s in event.failed)
        print(f"healed: {event.worked.describe()} holds ({failed} ran out of memory)")
        if event.recorded:
            print("recorded the miss in the calibration store: the next plan starts there")
        else:
            print(f"the miss was not recorded: {event.not_recorded}")
    else:
        return False
    return True
