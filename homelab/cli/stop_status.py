"""``homelab stop`` and ``homelab status [--json]``: the engine homelab runs, seen and stopped
from any shell. Registered by ``serve_cmd`` (the CLI lists command modules by name)."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from homelab.cli.common import print_json
from homelab.errors import ExitCode, HomelabError

if TYPE_CHECKING:
    from homelab.engine.kinds import EngineKind
    from homelab.engine.llamacpp.client import Health
    from homelab.engine.supervision.ownership import Running
    from homelab.engine.supervision.record import EngineRecord


def register_stop_status(subparsers: argparse._SubParsersAction) -> None:
    """Add ``stop`` and ``status``."""
    stop = subparsers.add_parser(
        "stop",
        help="stop the engine homelab runs",
        description="Stop the engine homelab started (detached or not).",
    )
    stop.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="seconds to wait after SIGTERM before SIGKILL (default 20)",
    )
    stop.set_defaults(func=run_stop)

    status = subparsers.add_parser(
        "status",
        help="what engine homelab runs, and how it is doing",
        description="Show the engine homelab runs: pid, URL, model, health.",
    )
    status.add_argument("--json", action="store_true", help="one JSON object")
    status.set_defaults(func=run_status)


WORDS = {
    "`replace`": "--replace",
    "`detach`": "--detach",
    "`port`": "--port",
    "`ctx`": "--ctx",
    "`slots`": "--parallel",
    "`cache_type`": "--cache-type",
    "`cache_type_k`": "--cache-type-k",
    "`cache_type_v`": "--cache-type-v",
    "`ubatch`": "--ubatch",
    "`unified`": "--kv-unified",
    "`start_timeout`": "--start-timeout",
    "`engine`": "--engine",
    "`no_gate`": "--no-gate",
    "`max_concurrent`": "--gate-max-concurrent",
    "`token_budget`": "--gate-budget",
    "`queue_timeout_s`": "--gate-queue-timeout",
    "`stop`": "`homelab stop`",
    "`status`": "`homelab status`",
}
"""How the CLI words the settings and actions the domain's hints name in backquotes."""


def word(text: str | None) -> str | None:
    """A domain hint in this CLI's words (settings as flags, actions as commands)."""
    if text is None:
        return None
    for setting, flag in WORDS.items():
        text = text.replace(setting, flag)
    return text


def worded(error: HomelabError) -> HomelabError:
    """``error`` with its hint worded for the CLI (the same object)."""
    error.hint = word(error.hint)
    return error


def worded_transition(transition):
    """A supervisor transition whose failure hint is worded for the CLI."""
    failure = transition.failure
    if failure is None or failure.hint is None:
        return transition
    return replace(transition, failure=replace(failure, hint=word(failure.hint)))


def _program(engine: str) -> str:
    from homelab.engine.kinds import KINDS

    kind = KINDS.get(engine)
    return engine if kind is None else kind.program


def _say_set_aside(now) -> None:
    for aside in now.set_aside:
        print(f"homelab: {aside.describe()}", file=sys.stderr)


def run_stop(args: argparse.Namespace) -> int:
    """``homelab stop``: stop the recorded engine, and any of homelab's engines that lost
    their record; 0 also when none runs."""
    from homelab.engine.supervision.ownership import (
        running,
        stop_engine,
        stop_found,
        stop_keeper,
    )
    from homelab.engine.supervision.state_file import StateFile
    from homelab.serve.gate import stop_recorded_gate

    store = StateFile()
    try:
        now = running(store)
        _say_set_aside(now)
        from homelab.cli.status_set import stop_set

        if stop_set(args.timeout) and now.nothing:
            return int(ExitCode.OK)
        if now.nothing:
            print("no homelab engine is running")
            return int(ExitCode.OK)
        record = now.record
        if record is not None:
            kept = stop_keeper(record, grace_s=args.timeout)  # it stops its gate and engine
            if kept:
                print(f"stopped: homelab's keeper pid {record.supervisor_pid}")
            if stop_recorded_gate(record) or (kept and record.gate_url is not None):
                print(f"stopped: the gate at {record.gate_url}")
            stopped = stop_engine(store, record, grace_s=args.timeout) or kept
            what = "stopped" if stopped else "cleared (its engine had already exited)"
            print(
                f"{what}: {_program(record.engine)} pid {record.pid} "
                f"serving {record.model} at {record.url}"
            )
        for found in now.unrecorded:
            if stop_found(found, grace_s=args.timeout):
                print(f"stopped: {found.cmdline[0]} pid {found.pid} (it had no readable record)")
    except HomelabError as error:
        raise worded(error) from None
    return int(ExitCode.OK)


def run_status(args: argparse.Namespace) -> int:
    """``homelab status [--json]``: 0 whether or not an engine runs (``running`` says which)."""
    from homelab.engine.supervision.ownership import running
    from homelab.engine.supervision.state_file import StateFile

    try:
        now = running(StateFile())
    except HomelabError as error:
        raise worded(error) from None
    _say_set_aside(now)
    unrecorded = [
        {"pid": e.pid, "pgid": e.pgid, "argv": list(e.cmdline), "engine_id": e.engine_id}
        for e in now.unrecorded
    ]
    record = now.record
    from homelab.cli.status_set import say_set

    if record is None and say_set(as_json=args.json):
        return int(ExitCode.OK)
    if record is None:
        _say_no_record(now, unrecorded, as_json=args.json)
    elif args.json:
        print_json(_status_json(record, _look(record), unrecorded))
    else:
        _say_status(record, _look(record))
    return int(ExitCode.OK)


def _say_no_record(now: Running, unrecorded: list[dict[str, object]], *, as_json: bool) -> None:
    """Status without a record: nothing runs, or engines homelab started that lost theirs
    (and why the last keeper stopped, when one did)."""
    from homelab.cli.keeper_status import end_lines
    from homelab.engine.supervision.restarts import read_end

    note = read_end()
    if as_json:
        data: dict[str, object] = (
            {"running": True, "unrecorded": unrecorded} if unrecorded else {"running": False}
        )
        print_json(data if note is None else {**data, "keeper_end": note.to_json()})
        return
    if note is not None:
        print("\n".join(end_lines(note)))
    elif unrecorded:
        for e in now.unrecorded:
            print(f"an engine homelab started runs without a readable record: pid {e.pid}")
            print(f"  {' '.join(e.cmdline)}")
        print("  `homelab stop` stops it")
    else:
        print("no homelab engine is running")


@dataclass(frozen=True, slots=True)
class _Seen:
    """What one look at the recorded engine, its supervisor and its gate found."""

    running: bool
    kind: EngineKind | None
    health: Health | None
    line: str | None
    """The engine's live status line (None: not running, or its kind has no status client)."""
    supervisor: int | None
    """The pid of the homelab that supervises it, while that one lives."""
    program: str
    gate_state: dict[str, object] | None
    backend: str | None
    """What the running binary computes on (its own device listing); None: not said."""


def _look(record: EngineRecord) -> _Seen:
    """Ask the recorded engine (its kind's status client) and its gate how they are."""
    from homelab.engine.kinds import KINDS
    from homelab.engine.llamacpp.client import status_line

    running_now = record.engine_alive()
    health = line = None
    kind = KINDS.get(record.engine)
    if running_now and kind is not None:
        client = kind.status_client(record.url, 3.0, record.api_key)  # always loopback
        if client is not None:
            with client:
                snapshot = client.snapshot(
                    kv_unified=None if record.facts is None else record.facts.unified
                )
            health, line = snapshot.health, status_line(snapshot)
    supervisor = record.supervisor_pid if record.supervisor_alive() else None
    program = _program(record.engine)
    gate_state = None
    if record.gate_url is not None and record.gate_alive():
        from homelab.gate.client import live_gate_state

        gate_state = live_gate_state(record.gate_url)
    backend = kind.backend(record.argv[0]) if running_now and kind and record.argv else None
    return _Seen(running_now, kind, health, line, supervisor, program, gate_state, backend)


def _status_json(
    record: EngineRecord, seen: _Seen, unrecorded: list[dict[str, object]]
) -> dict[str, object]:
    """``homelab status --json``'s object."""
    from homelab.cli.keeper_status import keeper_json, restarts_json
    from homelab.engine.kinds import logged_kv_tokens
    from homelab.serve.prove import launch_of

    health = seen.health
    return {
        "running": seen.running,
        "engine": {"url": record.url, "kind": record.engine},
        "program": seen.program,
        "pid": record.pid,
        "pgid": record.pgid,
        "url": record.public_url,
        "model": record.model,
        "argv": list(record.argv),
        "log": record.log_path,
        "started_at": record.started_at,
        "uptime_s": round(time.time() - record.started_at, 1),
        "ready_at": record.ready_at,
        "detached": record.detached,
        "supervisor_pid": seen.supervisor,
        "keeper": keeper_json(record, seen.supervisor),
        "restarts": restarts_json(record.restarts),
        "port_pinned": record.port_pinned,
        "plan": None if record.facts is None else record.facts.to_json(),
        "kv_tokens": None if seen.kind is None else logged_kv_tokens(seen.kind, record.log_path),
        "gate": None
        if record.gate_url is None
        else {
            "url": record.gate_url,
            "budget_tokens": record.gate_budget_tokens,
            "pid": record.gate_pid,
            "running": record.gate_alive(),
            "state": seen.gate_state,
        },
        "health": None
        if health is None
        else {
            "state": health.state.value,
            "http_status": health.http_status,
            "detail": health.detail,
        },
        "status_line": seen.line,
        "backend": seen.backend,
        "launch": launch_of(record.pid),  # the launch proof and heal, when there was one
        "unrecorded": unrecorded,
    }


def _say_status(record: EngineRecord, seen: _Seen) -> None:
    """``homelab status``'s lines: the engine, its gate, its uptime and live line, its log."""
    from homelab.cli.keeper_status import how_kept, restart_lines

    how = how_kept(record, seen.supervisor)
    if not seen.running:
        print(f"{seen.program} is between restarts ({how}); last pid {record.pid}, {record.url}")
    else:
        print(f"{seen.program} pid {record.pid} serving {record.model}")
        if record.gate_url is not None:
            _say_gate(record, seen.gate_state)
        else:
            print(f"  {record.url} · no gate (the engine serves directly)")
        from homelab.serve.describe import duration

        print(f"  up {duration(time.time() - record.started_at)} · {how}")
        if seen.backend is not None:
            print(f"  backend: {seen.backend}")
        if seen.line is not None:
            print(f"  {seen.line}")
    for line in restart_lines(record.restarts):
        print(f"  {line}")
    print(f"  log: {record.log_path}")


def _say_gate(record: EngineRecord, gate_state: dict[str, object] | None) -> None:
    ceiling = record.gate_budget_tokens
    gone = "" if record.gate_alive() else " (not running)"
    admits = f" · up to {ceiling} tokens per request" if ceiling else ""
    print(f"  gate {record.gate_url}{gone}{admits} · clients use this URL")
    print(f"  engine {record.url} (internal)")
    if gate_state is not None:
        from homelab.gate.client import describe_gate_state

        for gate_line in describe_gate_state(gate_state):
            print(f"  {gate_line}")
