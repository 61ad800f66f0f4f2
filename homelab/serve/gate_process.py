"""A detached engine's gate, in a process of its own so it outlives the serve that started it.

``python -m homelab.serve.gate_process`` reads one JSON object on stdin (the gate
settings — the API key among them, so never on the command line —, the engine URL, the
plan's facts and the engine record's path), runs the one
:class:`~homelab.gate.runner.GateRunner` there is, and answers one JSON line on stdout:
``{"url", "budget_tokens", "ceiling_tokens", "max_concurrent"}`` once it listens, or ``{"error": ...}``
(the HomelabError it met). Then it serves until SIGTERM, or until the engine record no
longer describes an engine with this gate (``homelab stop``, a replace, a start that
failed), looked at every second. It runs in a session of its own, logging to
``state_dir()/logs/gate-….log`` (one line per request: :mod:`homelab.gate.access_log`),
rotated and rate-limited (:mod:`homelab.gate.log_file`). When the engine restarts on another plan (the record's
facts change), the gate takes the new limits on its live queue.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine.supervision.process import create_time_of
from homelab.engine.supervision.state_file import StateFile
from homelab.errors import EngineError, ExitCode, HomelabError, UsageError

if TYPE_CHECKING:
    from homelab.engine.supervision.facts import PlanFacts
    from homelab.engine.supervision.record import EngineRecord
    from homelab.gate.runner import GateRunner
    from homelab.gate.settings import GateSettings

ANSWER_TIMEOUT_S = 60.0
"""How long the gate process may take to say it listens."""
WATCH_EVERY_S = 1.0
GONE_AFTER = 3
"""Looks in a row without a live record (an engine restart rewrites it) before it ends."""


class GateChild:
    """A gate process this session spawned."""

    def __init__(self, proc: subprocess.Popen[bytes], answer: dict[str, object]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.create_time = create_time_of(proc.pid)
        self.url = str(answer["url"])
        self.budget = _count(answer.get("budget_tokens"))
        self.ceiling = _count(answer.get("ceiling_tokens"))
        self.max_concurrent = _count(answer.get("max_concurrent"))

    def let_go(self) -> None:
        """Leave it running (it watches the engine record and ends with the engine)."""
        self.proc.returncode = 0  # never reaped here: the Popen must not warn at exit


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def spawn_gate(
    settings: GateSettings,
    engine_url: str,
    facts: PlanFacts | None,
    state_file: Path,
    engine_key: str | None = None,
) -> GateChild:
    """Start a detached gate process; returns once it listens. Its keys (the gate's and the
    engine's own) go in the payload on its stdin, never on its command line (``ps``).

    Raises:
        HomelabError: the gate could not listen (its own error), or it did not answer.
    """
    from homelab.engine.supervision.attempt_log import new_log_path
    from homelab.paths import state_dir

    log_path = new_log_path(state_dir() / "logs", "gate")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "settings": asdict(settings),
        "engine_url": engine_url,
        "engine_key": engine_key,
        "facts": None if facts is None else facts.to_json(),
        "state_file": str(state_file),
        "log_path": str(log_path),
    }
    with open(log_path, "ab") as log:  # what the process says before its log is set up
        proc = subprocess.Popen(
            [sys.executable, "-m", "homelab.serve.gate_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            start_new_session=True,
        )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(payload).encode("utf-8"))
        proc.stdin.close()
    except BrokenPipeError:
        pass
    ready, _, _ = select.select([proc.stdout], [], [], ANSWER_TIMEOUT_S)
    line = proc.stdout.readline() if ready else b""
    proc.stdout.close()
    try:
        answer = json.loads(line) if line else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "url" not in answer:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            raise _error_from(answer["error"])
        raise EngineError(
            f"the gate process did not start (log: {log_path})",
            hint=f"read {log_path}; `no_gate` serves the engine without a gate",
            title="Gate did not start",
        )
    return GateChild(proc, answer)


def _error_from(data: dict[str, object]) -> HomelabError:
    code = data.get("exit_code")
    kind = {int(ExitCode.USAGE): UsageError, int(ExitCode.ENGINE): EngineError}.get(
        code if isinstance(code, int) else -1, HomelabError
    )
    hint = data.get("hint")
    error = kind(
        str(data.get("message")),
        hint=hint if isinstance(hint, str) else None,
        title=str(data.get("title")),
    )
    if kind is HomelabError and isinstance(code, int):
        error.exit_code = ExitCode(code) if code in set(ExitCode) else ExitCode.FAILURE
    return error


def _engine_goes_on(state_file: Path, misses: int) -> tuple[str | None, int, EngineRecord | None]:
    """(why the gate ends, or None to keep serving; misses so far; the record) after one look."""
    record = StateFile(state_file).read()
    if record is not None and record.gate_pid not in (None, os.getpid()):
        return f"the record names another gate (pid {record.gate_pid})", misses, None
    if record is None or not (record.engine_alive() or record.supervisor_alive()):
        misses += 1
        gone = "no engine record" if record is None else f"engine pid {record.pid} is gone"
        return (gone if misses >= GONE_AFTER else None), misses, None
    return None, 0, record


def _follow_plan(runner: GateRunner, record: EngineRecord, state_file: Path) -> None:
    """The engine restarted on another plan (its record's facts changed): take its limits
    and put the new per-request ceiling in the record."""
    if record.facts == runner.facts or not record.engine_alive():
        return
    limits = runner.retarget(record.facts)
    logging.getLogger("homelab.gate").info("new plan, limits now: %s", limits)
    if limits is not None and record.gate_budget_tokens != limits.ceiling_tokens:
        with contextlib.suppress(OSError):
            StateFile(state_file).update(record.pid, gate_budget_tokens=limits.ceiling_tokens)


def main() -> int:
    from homelab.engine.supervision.facts import PlanFacts
    from homelab.gate.log_file import log_to_file
    from homelab.gate.runner import GateRunner
    from homelab.gate.settings import GateSettings

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    payload = json.loads(sys.stdin.read())
    log_to_file(Path(payload["log_path"]))  # rotated, its errors rate-limited
    facts = None if payload["facts"] is None else PlanFacts.from_json(payload["facts"])
    state_file = Path(payload["state_file"])
    given = payload["settings"]
    given["sampling"] = tuple(
        (name, value) for name, value in given.get("sampling", ())
    )  # JSON lists
    engine_key = payload.get("engine_key")
    runner = GateRunner(
        GateSettings(**given),
        payload["engine_url"],
        facts,
        engine_key if isinstance(engine_key, str) else None,
    )
    try:
        url = runner.start()
    except HomelabError as error:
        answer = {
            "title": error.title,
            "message": error.message,
            "hint": error.hint,
            "exit_code": int(error.exit_code),
        }
        print(json.dumps({"error": answer}), flush=True)
        return int(error.exit_code)
    state = runner.state()
    print(
        json.dumps(
            {
                "url": url,
                "budget_tokens": state.budget_tokens,
                "ceiling_tokens": state.ceiling_tokens,
                "max_concurrent": state.max_concurrent,
            }
        ),
        flush=True,
    )
    with open(os.devnull, "wb") as null:  # the serve that reads the answer may exit now
        os.dup2(null.fileno(), sys.stdout.fileno())
    misses = 0
    try:
        while not stop.wait(WATCH_EVERY_S):
            why, misses, record = _engine_goes_on(state_file, misses)
            if why is not None:
                logging.getLogger("homelab.gate").info("the gate ends: %s", why)
                break
            if record is not None:
                _follow_plan(runner, record, state_file)
    finally:
        runner.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
