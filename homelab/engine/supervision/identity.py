"""Which processes are homelab's engines: a marker in their environment, found and verified.

Every engine homelab spawns carries two environment variables:

- ``HOMELAB_ENGINE=<id>``: a fresh id per spawn, also written into its state-file record;
- ``HOMELAB_ENGINE_STATE=<record path>``: which state file it belongs to (one per
  ``HOMELAB_STATE_DIR``, so two homelab installations never see each other's engines).

The kernel keeps a process's initial environment readable (``/proc/PID/environ``, via
psutil) by its owner, so homelab finds its engines even when the record that
described them is gone or unreadable (:func:`find_engines`), and it checks that a
recorded pid is still that engine before signalling it (:func:`verify`): the start
time matches, the process leads the recorded group, and its marker matches.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil

ENGINE_VAR = "HOMELAB_ENGINE"
STATE_VAR = "HOMELAB_ENGINE_STATE"
_START_SLACK_S = 0.05


def new_engine_id() -> str:
    """A fresh engine id (one per spawn)."""
    return uuid.uuid4().hex


def marker_env(engine_id: str, record_path: Path) -> dict[str, str]:
    """The environment variables that mark an engine as homelab's (for ``record_path``)."""
    return {ENGINE_VAR: engine_id, STATE_VAR: str(record_path)}


@dataclass(frozen=True, slots=True)
class FoundEngine:
    """A running process that carries homelab's engine marker."""

    pid: int
    pgid: int
    create_time: float
    engine_id: str
    cmdline: tuple[str, ...]


def _marker(process: psutil.Process) -> tuple[str, str] | None:
    """(engine id, record path) from a process's environment, or None."""
    try:
        env = process.environ()
    except (psutil.Error, OSError):
        return None
    engine_id, state = env.get(ENGINE_VAR), env.get(STATE_VAR)
    if not engine_id or not state:
        return None
    return engine_id, state


def key_given(pid: int, engine_id: str | None, key_env: str) -> str | None:
    """The API key engine ``pid`` was given in its environment (``key_env``), read back from
    the kernel (its owner alone may): how an adopter whose record lost the key (an edited
    state file) still reaches the engine. None: no such key, not readable, or ``pid`` is not
    the engine ``engine_id`` names (a recycled pid's environment is never trusted)."""
    from homelab.engine.engine_key import is_engine_key

    if engine_id is None:
        return None
    try:
        process = psutil.Process(pid)
        marker = _marker(process)
        key = process.environ().get(key_env) if marker and marker[0] == engine_id else None
    except (psutil.Error, OSError):
        return None
    return key if is_engine_key(key) else None


def _found(process: psutil.Process, engine_id: str) -> FoundEngine | None:
    try:
        pgid = os.getpgid(process.pid)
        if pgid != process.pid or process.status() == psutil.STATUS_ZOMBIE:
            return None  # a worker the engine started (it inherits the marker), or dead
        return FoundEngine(
            process.pid, pgid, process.create_time(), engine_id, tuple(process.cmdline())
        )
    except (psutil.Error, OSError):
        return None


def find_engines(record_path: Path) -> list[FoundEngine]:
    """homelab's engines that belong to ``record_path``, oldest first (group leaders only)."""
    wanted = str(record_path)
    uid = os.getuid()
    found: list[FoundEngine] = []
    for process in psutil.process_iter(["uids"]):
        try:
            uids = process.info["uids"]
        except (psutil.Error, KeyError):
            continue
        if uids is None or uids.real != uid or process.pid == os.getpid():
            continue
        marker = _marker(process)
        if marker is None or marker[1] != wanted:
            continue
        engine = _found(process, marker[0])
        if engine is not None:
            found.append(engine)
    return sorted(found, key=lambda e: e.create_time)


def verify(pid: int, *, pgid: int, create_time: float | None, engine_id: str | None) -> str | None:
    """Why ``pid`` is *not* the engine a record describes; None when it is.

    It is when it runs, started at ``create_time`` (when recorded), leads process group
    ``pgid`` (which is not homelab's own), and carries ``engine_id`` (when recorded).
    With neither a start time nor an id recorded nothing proves it, so it is not.
    """
    if create_time is None and engine_id is None:
        return "the record has neither its start time nor its marker"
    try:
        process = psutil.Process(pid)
        started = process.create_time()
        if process.status() == psutil.STATUS_ZOMBIE:
            return f"pid {pid} has exited"
        group = os.getpgid(pid)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return f"pid {pid} is not running"
    except (psutil.Error, OSError) as error:
        return f"pid {pid} cannot be inspected ({error})"
    if create_time is not None and abs(started - create_time) > _START_SLACK_S:
        return f"pid {pid} is another process now (it started at another time)"
    if group != pgid:
        return f"pid {pid} is in process group {group}, not the recorded {pgid}"
    if pgid == os.getpgrp():
        return f"process group {pgid} is homelab's own"
    if engine_id is not None:
        marker = _marker(process)
        if marker is None or marker[0] != engine_id:
            return f"pid {pid} does not carry the engine's marker"
    return None
