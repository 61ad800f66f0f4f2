"""One engine at a time: adopt the one that runs, replace it, or refuse; and stop it from outside.

A front-end (``homelab serve``, the TUI) calls :func:`decide` with what runs (the live
record, and homelab's engines found by their marker) before starting anything:

- nothing runs: start;
- the same model runs, nobody else supervises it, and it runs with every setting the
  person asked for (context, slots, cache types, a pinned port): adopt it;
- ``replace`` was asked for: stop it, then start;
- otherwise refuse, saying what runs where and which settings differ: never a second
  engine on the card, never a setting silently dropped.

An engine homelab started whose record is gone or unreadable is still found (its
marker) and refused or replaced, never joined by a second one.

Hints name settings and actions in backquotes (`replace`, `stop`); each front-end words them.

:func:`stop_engine` marks the record "stop requested" *before* signalling, so a
supervisor watching the engine reads the exit as a stop, not a crash to restart from,
and it signals only after checking the recorded pid is still that engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from homelab.engine.supervision.facts import Asked, differences
from homelab.engine.supervision.identity import FoundEngine, find_engines
from homelab.engine.supervision.process import EngineProcess
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import SetAside, StateFile
from homelab.errors import AlreadyServed, EngineError

Decision = Literal["start", "adopt", "replace"]
_TITLE = "Engine already running"


@dataclass(frozen=True, slots=True)
class Running:
    """What homelab runs right now, as far as it can tell."""

    record: EngineRecord | None
    """The live record, when the state file has one."""
    unrecorded: tuple[FoundEngine, ...] = ()
    """homelab's engines (by their marker) that no readable record describes."""
    set_aside: tuple[SetAside, ...] = ()
    """Unreadable state files moved out of the way while looking."""

    @property
    def nothing(self) -> bool:
        return self.record is None and not self.unrecorded


def running(store: StateFile) -> Running:
    """The live record and any marked engine it does not describe."""
    notes: list[SetAside] = []
    record = store.live(notes)
    found = find_engines(store.path)
    unrecorded = tuple(e for e in found if record is None or e.pid != record.pid)
    return Running(record, unrecorded, tuple(notes))


def same_model(a: str, b: str) -> bool:
    """True when two model paths name the same file."""
    return os.path.realpath(a) == os.path.realpath(b)


_SETTING_WORDS = {
    "engine": "engine",
    "port": "port",
    "ctx": "context",
    "slots": "slots",
    "cache_type_k": "K cache",
    "cache_type_v": "V cache",
    "unified": "unified KV",
}


def describe_differences(found: list[tuple[str, object, object]]) -> tuple[str, str]:
    """("runs with context 8192 × 2 slots", "you asked 4096 × 1") style halves."""
    running_words, asked_words = [], []
    names = [name for name, _, _ in found]
    values = {name: ("unknown" if run is None else run, ask) for name, run, ask in found}
    if "ctx" in values and "slots" in values:
        (ctx_run, ctx_ask), (slots_run, slots_ask) = values.pop("ctx"), values.pop("slots")
        running_words.append(f"context {ctx_run} × {slots_run} slots")
        asked_words.append(f"{ctx_ask} × {slots_ask}")
    for name in names:
        if name in values:
            run, ask = values[name]
            word = _SETTING_WORDS[name]
            running_words.append(f"{word} {run}")
            asked_words.append(f"{word} {ask}")
    return ", ".join(running_words), ", ".join(asked_words)


def decide(now: Running, model: str, *, asked: Asked | None = None, replace: bool) -> Decision:
    """What to do about what runs when asked to serve ``model`` with ``asked`` settings.

    Raises:
        EngineError: something runs that cannot be adopted as asked (another model,
            other settings, another supervisor, no record) and ``replace`` was not set; or
            a set of models runs (never replaced by one model's serve).
    """
    from homelab.engine.supervision.set_record import refuse_beside_set

    refuse_beside_set()
    if now.nothing:
        return "start"
    if replace:
        return "replace"
    record = now.record
    if record is None:
        engine = now.unrecorded[0]
        raise EngineError(
            f"an engine homelab started ({Path(engine.cmdline[0]).name if engine.cmdline else '?'}"
            f" pid {engine.pid}) "
            "runs without a readable record, so homelab cannot adopt it",
            hint="`replace` stops it and starts the new one; `stop` stops it",
            title=_TITLE,
        )
    where = f"{record.engine} (pid {record.pid}) at {record.url}"
    kept = record.keeper_alive() and record.supervisor_pid != os.getpid()
    if record.supervised_by_other() and not kept:
        raise EngineError(
            f"{where} already serves {record.model}, "
            f"supervised by homelab pid {record.supervisor_pid}",
            hint="use it as it is; `replace` restarts it with new settings, `stop` stops it",
            title=_TITLE,
        )
    by = f", kept by homelab's keeper (pid {record.supervisor_pid})" if kept else ""
    if not same_model(record.model, model):
        raise EngineError(
            f"{where} already serves another model: {record.model}{by}",
            hint="`replace` replaces it; `stop` stops it",
            title=_TITLE,
        )
    found = differences(record.facts, record.public_port, asked or Asked(), record.engine)
    if found:
        runs, wanted = describe_differences(found)
        raise EngineError(
            f"{where} already serves {Path(record.model).name}{by}, but it runs with {runs}; "
            f"you asked {wanted}",
            hint="`replace` restarts it with the new settings; leave them out to use it as it is",
            title="Engine runs with other settings",
        )
    if kept:
        raise AlreadyServed(
            f"{Path(record.model).name} is already served at {record.public_url}{by}",
            url=record.public_url,
        )
    return "adopt"


def stop_engine(store: StateFile, record: EngineRecord, grace_s: float = 20.0) -> bool:
    """Stop the recorded engine (SIGTERM to its group, wait, SIGKILL) and remove the record;
    homelab's keeper of it first (:func:`stop_keeper`), which stops its gate and engine.

    A supervising homelab sees "stop requested" and ends instead of restarting.
    If that supervisor restarted the engine just before the mark landed, the
    new engine is stopped too (up to three rounds). Nothing is signalled unless the
    recorded pid is verifiably that engine (start time, process group, marker).

    Returns:
        True when an engine process was running and was stopped.

    Raises:
        EngineError: the engine belongs to another user (not allowed to signal it).
    """
    stopped = stop_keeper(record, grace_s)  # a keeper stops its gate and engine itself
    for _ in range(3):
        store.update(record.pid, stop_requested=True)
        if record.not_the_engine() is None:
            stopped = _stop(record.pid, record.pgid, record.create_time, grace_s) or stopped
        store.clear(record.pid)
        following = store.read()
        if following is None or following.pid == record.pid or not following.engine_alive():
            return stopped
        record = following
    return stopped


def stop_keeper(record: EngineRecord, grace_s: float = 20.0) -> bool:
    """Stop homelab's keeper of ``record`` (SIGTERM to its group, wait, SIGKILL); it stops its
    engine and its gate itself. True when a keeper ran. Nothing is signalled unless the
    recorded pid is verifiably that keeper (its start time): a pid reused by another
    program is left alone."""
    pid, created = record.supervisor_pid, record.supervisor_create_time
    if not record.kept or pid is None or created is None or pid == os.getpid():
        return False
    try:
        proc = EngineProcess.adopt(pid, pgid=pid, create_time=created)  # its own session
    except EngineError:
        return False
    proc.stop(grace_s)
    proc.close()
    return True


def stop_found(engine: FoundEngine, grace_s: float = 20.0) -> bool:
    """Stop an engine found by its marker (no record); True when it was running."""
    return _stop(engine.pid, engine.pgid, engine.create_time, grace_s)


def _stop(pid: int, pgid: int, create_time: float | None, grace_s: float) -> bool:
    """Stop engine ``pid``; True when it was running (not when it exited a moment ago)."""
    try:
        proc = EngineProcess.adopt(pid, pgid=pgid, create_time=create_time)
    except EngineError:
        return False
    proc.stop(grace_s)
    proc.close()
    return True
