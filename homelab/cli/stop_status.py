"""``homelab stop`` and ``homelab status [--json]``: the engine homelab runs, seen and stopped
from any shell. Registered by ``serve_cmd`` (the CLI lists command modules by name)."""

from __future__ import annotations

import argparse
import time

from homelab.cli.common import print_json
from homelab.cli.serve_output import duration
from homelab.errors import ExitCode


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


def run_stop(args: argparse.Namespace) -> int:
    """``homelab stop``: stop the recorded engine; 0 also when none runs."""
    from homelab.engine.supervision.ownership import stop_engine
    from homelab.engine.supervision.state_file import StateFile

    store = StateFile()
    record = store.live()
    if record is None:
        print("no homelab engine is running")
        return int(ExitCode.OK)
    stopped = stop_engine(store, record, grace_s=args.timeout)
    what = "stopped" if stopped else "cleared (its engine had already exited)"
    print(f"{what}: {record.engine} pid {record.pid} serving {record.model} at {record.url}")
    return int(ExitCode.OK)


def run_status(args: argparse.Namespace) -> int:
    """``homelab status [--json]``: 0 whether or not an engine runs (``running`` says which)."""
    from homelab.engine.llamacpp.client import LlamaServerClient, status_line
    from homelab.engine.supervision.state_file import StateFile

    record = StateFile().live()
    if record is None:
        if args.json:
            print_json({"running": False})
        else:
            print("no homelab engine is running")
        return int(ExitCode.OK)
    running = record.engine_alive()
    health = line = None
    if running:
        with LlamaServerClient(record.url, timeout_s=3.0) as client:
            snapshot = client.snapshot(kv_unified="-kvu" in record.argv)
        health, line = snapshot.health, status_line(snapshot)
    supervisor = record.supervisor_pid if record.supervisor_alive() else None
    if args.json:
        print_json(
            {
                "running": running,
                "engine": record.engine,
                "pid": record.pid,
                "pgid": record.pgid,
                "url": record.url,
                "model": record.model,
                "argv": list(record.argv),
                "log": record.log_path,
                "started_at": record.started_at,
                "uptime_s": round(time.time() - record.started_at, 1),
                "ready_at": record.ready_at,
                "detached": record.detached,
                "supervisor_pid": supervisor,
                "health": None
                if health is None
                else {
                    "state": health.state.value,
                    "http_status": health.http_status,
                    "detail": health.detail,
                },
                "status_line": line,
            }
        )
        return int(ExitCode.OK)
    kind = "detached" if record.detached else f"supervised by homelab pid {supervisor}"
    if not running:
        print(f"{record.engine} is between restarts ({kind}); last pid {record.pid}, {record.url}")
    else:
        print(f"{record.engine} pid {record.pid} serving {record.model}")
        print(f"  {record.url} · up {duration(time.time() - record.started_at)} · {kind}")
        print(f"  {line}")
    print(f"  log: {record.log_path}")
    return int(ExitCode.OK)
