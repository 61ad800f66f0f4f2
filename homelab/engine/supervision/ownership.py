"""One engine at a time: adopt the one that runs, replace it, or refuse; and stop it from outside.

``homelab serve`` (and the TUI) call :func:`decide` with the live record from
the state file before starting anything:

- nothing runs: start;
- the same model runs and nobody supervises it (a detached engine, or one whose
  homelab died without taking it along): adopt it;
- ``--replace``: stop it, then start;
- otherwise refuse, saying what runs where: never a second engine on the card.

:func:`stop_engine` is ``homelab stop``: it marks the record "stop requested"
*before* signalling, so a supervisor watching the engine reads the exit as a
stop, not a crash to restart from.
"""

from __future__ import annotations

import os
from typing import Literal

from homelab.engine.supervision.process import EngineProcess, alive
from homelab.engine.supervision.state_file import EngineRecord, StateFile
from homelab.errors import EngineError

Decision = Literal["adopt", "replace"]


def same_model(a: str, b: str) -> bool:
    """True when two model paths name the same file."""
    return os.path.realpath(a) == os.path.realpath(b)


def decide(record: EngineRecord, model: str, *, replace: bool) -> Decision:
    """What to do about the engine ``record`` describes when asked to serve ``model``.

    Raises:
        EngineError: it serves another model, or another homelab supervises it, and
            ``replace`` was not asked for.
    """
    if replace:
        return "replace"
    where = f"{record.engine} (pid {record.pid}) at {record.url}"
    if record.supervised_by_other():
        raise EngineError(
            f"{where} already serves {record.model}, "
            f"supervised by homelab pid {record.supervisor_pid}",
            hint="use it as it is; `homelab serve MODEL --replace` restarts it with new settings, "
            "`homelab stop` stops it",
            title="Engine already running",
        )
    if not same_model(record.model, model):
        raise EngineError(
            f"{where} already serves another model: {record.model}",
            hint="`homelab serve MODEL --replace` replaces it; `homelab stop` stops it",
            title="Engine already running",
        )
    return "adopt"


def stop_engine(store: StateFile, record: EngineRecord, grace_s: float = 20.0) -> bool:
    """Stop the recorded engine (SIGTERM to its group, wait, SIGKILL) and remove the record.

    A supervising homelab sees "stop requested" and ends instead of restarting.
    If that supervisor restarted the engine just before the mark landed, the
    new engine is stopped too (up to three rounds).

    Returns:
        True when an engine process was running and was stopped.

    Raises:
        EngineError: the engine belongs to another user (not allowed to signal it).
    """
    stopped = False
    for _ in range(3):
        store.update(record.pid, stop_requested=True)
        if alive(record.pid, record.create_time):
            try:
                proc = EngineProcess.adopt(
                    record.pid, pgid=record.pgid, create_time=record.create_time
                )
            except EngineError:  # it exited between the two looks
                proc = None
            if proc is not None:
                proc.stop(grace_s)
                proc.close()
                stopped = True
        store.clear(record.pid)
        following = store.read()
        if following is None or following.pid == record.pid or not following.engine_alive():
            return stopped
        record = following
    return stopped
