"""The admission gate's numbers for the TUI's live panel (the domain calls, like
:mod:`homelab.ui.backend`): asked of the gate over loopback HTTP, worded as ``homelab
status`` words them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homelab.serve.session import ServeSession


def gate_state(session: ServeSession | None) -> dict[str, Any] | None:
    """The session's admission gate's numbers now; None without a gate or when it does
    not answer."""
    gate = None if session is None else session.gate
    if gate is None or gate.url is None:
        return None
    from homelab.gate.client import live_gate_state

    return live_gate_state(gate.url)


def gate_lines(state: dict[str, Any]) -> list[str]:
    """What the live panel says about the gate (the lines ``homelab status`` prints)."""
    from homelab.gate.client import describe_gate_state

    return describe_gate_state(state)
