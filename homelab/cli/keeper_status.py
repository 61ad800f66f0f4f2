"""What ``homelab status`` says about homelab's keeper of a detached serve and its restarts."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.engine.supervision.record import EngineRecord
    from homelab.engine.supervision.restarts import KeeperEnd, Restart

SHOWN = 5
"""Restarts the human status lists (the latest); ``--json`` has every one kept."""


def how_kept(record: EngineRecord, supervisor: int | None) -> str:
    """Who keeps the engine: its keeper, a gone keeper, a terminal's serve, or nobody."""
    if record.kept:
        if supervisor is not None:
            return f"kept by homelab's keeper (pid {supervisor})"
        return (
            f"its keeper (pid {record.supervisor_pid}) is gone: nothing restarts it; "
            "`homelab serve` of this model starts a new one"
        )
    return "detached" if record.detached else f"supervised by homelab pid {supervisor}"


def restart_lines(restarts: tuple[Restart, ...]) -> list[str]:
    """``restarted engine at 14:02:11: llama-server crashed (killed by SIGKILL)`` lines."""
    return [
        f"restarted {r.what} at {_clock(r.at)}: {r.describe().split(': ', 1)[1]}"
        for r in restarts[-SHOWN:]
    ]


def keeper_json(record: EngineRecord, supervisor: int | None) -> dict[str, object] | None:
    """``status --json``'s ``keeper``: null when no keeper keeps it."""
    if not record.kept:
        return None
    return {"pid": record.supervisor_pid, "running": supervisor is not None}


def restarts_json(restarts: tuple[Restart, ...]) -> list[dict[str, object]]:
    return [r.to_json() for r in restarts]


def end_lines(note: KeeperEnd) -> list[str]:
    """A keeper that stopped restarting: when, why, and what it had restarted."""
    lines = [f"homelab's keeper of {note.model} stopped at {_clock(note.at)}: {note.why}"]
    return lines + [f"  {line}" for line in restart_lines(note.restarts)]


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
