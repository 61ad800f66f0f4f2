"""The real gate (``homelab.gate.runner.GateRunner``) in a child process, for the benchmarks.

Not a benchmark itself. ``homelab serve`` runs the gate apart from its clients, so the
benches do too: the bench's client then does not share the gate's interpreter lock. The
child is this file::

    python bench/_gate_process.py '{"engine_url": ..., "settings": {...}, "facts": {...}}'

It prints ``url URL`` once the gate listens, answers each ``state`` line on its stdin with
``GateRunner.state()`` as one JSON line, and stops the gate when stdin closes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homelab.engine.supervision.facts import PlanFacts


class GateProcess:
    """The real gate (``GateRunner``) in a child process, as ``homelab serve`` runs it apart
    from its clients; so the bench's client does not share the gate's interpreter lock.

    ``state()`` asks the child for ``GateRunner.state()`` (a dict of the frozen snapshot).
    """

    def __init__(
        self,
        engine_url: str,
        settings: dict[str, object],
        facts: PlanFacts | None,
        *,
        stderr: IO[bytes] | None = None,
    ) -> None:
        """``stderr``: where the child's log goes (warnings and errors, tracebacks
        included: Python's last-resort handler); None: this process's stderr."""

        payload = {
            "engine_url": engine_url,
            "settings": settings,
            "facts": None if facts is None else facts.to_json(),
        }
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), json.dumps(payload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("url "):
            self.close()
            raise RuntimeError(f"the gate did not start: {line!r}")
        self.url = line.split(" ", 1)[1].strip().rstrip("/")
        self.pid = self._proc.pid

    def state(self) -> dict[str, Any]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("state\n")
        self._proc.stdin.flush()
        return dict(json.loads(self._proc.stdout.readline()))

    def close(self) -> None:

        if self._proc.stdin is not None:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        try:
            self._proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> GateProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gate_child(payload: dict[str, Any]) -> None:
    """Run ``GateRunner`` until stdin closes; answer ``state`` lines with its state as JSON."""

    from homelab.engine.supervision.facts import PlanFacts
    from homelab.gate.runner import GateRunner
    from homelab.gate.settings import GateSettings

    settings = GateSettings(**payload["settings"])
    facts = None if payload["facts"] is None else PlanFacts.from_json(payload["facts"])
    runner = GateRunner(settings, str(payload["engine_url"]), facts)
    try:
        print("url", runner.start(), flush=True)
        for line in sys.stdin:
            if line.strip() == "state":
                print(json.dumps(runner.state().to_json()), flush=True)
    finally:
        runner.stop()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    _gate_child(json.loads(sys.argv[1]))
