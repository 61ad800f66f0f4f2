"""RPC workers for real: ``homelab worker`` processes on 127.0.0.1 standing in for other hosts.

``start_worker(port=None, threads=1)`` runs ``python -m homelab worker`` (the real CLI, the
real rpc-server ``homelab engine build`` made) and waits for its ``ready:`` line; every
worker still running at teardown gets SIGINT (the Ctrl-C path), and the test fails if its
rpc-server outlived it. One thread each: the suite shares two cores.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.factory.server_log import free_port

READY_TIMEOUT_S = 60.0
_PID = re.compile(r"\bpid (\d+)")


@dataclass
class Worker:
    """One running ``homelab worker``: its endpoint, CLI process and rpc-server pid."""

    endpoint: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    server_pids: list[int] = field(default_factory=list)
    _reader: threading.Thread | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                match = _PID.search(line)
                if match:
                    self.server_pids.append(int(match.group(1)))
                self._changed.notify_all()

    def wait_for(self, pattern: str, *, count: int = 1, timeout_s: float = READY_TIMEOUT_S) -> str:
        """The ``count``-th line matching ``pattern``; fails the test on timeout or exit."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                hits = [line for line in self.lines if re.search(pattern, line)]
                if len(hits) >= count:
                    return hits[count - 1]
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._alive_reader()):
                    pytest.fail(
                        f"worker {self.endpoint}: no {pattern!r} line; it printed:\n"
                        + "\n".join(self.lines),
                        pytrace=False,
                    )
                self._changed.wait(min(left, 0.5))

    def _alive_reader(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def interrupt(self, sig: int = signal.SIGINT, timeout_s: float = 30.0) -> int:
        """Send ``sig`` to the CLI (as Ctrl-C does) and wait for it; its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout_s)
        if self._reader is not None:
            self._reader.join(5)
        return code


def worker_env() -> dict[str, str]:
    """This checkout first on the path, so the subprocess runs the code under test."""
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def start_worker() -> Iterator[Callable[..., Worker]]:
    made: list[Worker] = []

    def start(port: int | None = None, *, threads: int = 1, wait: bool = True, extra=()) -> Worker:
        port = port or free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "homelab", "worker", "--port", str(port)]
            + ["--threads", str(threads), *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=worker_env(),
        )
        worker = Worker(f"127.0.0.1:{port}", proc)
        worker._reader = threading.Thread(target=worker.read, daemon=True)
        worker._reader.start()
        made.append(worker)
        if wait:
            worker.wait_for(r"^ready: RPC worker at ")
        return worker

    yield start
    left = []
    for worker in made:
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.interrupt()
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait(10)
        for pid in worker.server_pids:
            if pid_alive(pid):
                left.append(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
    assert not left, f"rpc-server processes outlived their homelab worker (killed now): {left}"


@pytest.fixture
def two_workers(start_worker) -> tuple[Worker, Worker]:
    """Two workers on 127.0.0.1, standing in for two hosts."""
    return start_worker(), start_worker()


@pytest.fixture
def engines() -> Iterator[list[int]]:
    """Engine pids a test started (``engines.append(pid)``): killed at teardown if still alive,
    and the test fails for leaving them."""
    pids: list[int] = []
    yield pids
    left = [pid for pid in pids if pid_alive(pid)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    assert not left, f"engines left running after the test (killed now): {left}"


@dataclass
class Served:
    """What one serve over the workers planned, ran and logged, and the engine's answer."""

    plan: Any
    argv: list[str]
    lines: list[str]
    reply: Any


def prepared_on(model: str, options: Any, remote: tuple[Any, ...]) -> Any:
    """``model`` prepared as ``homelab serve`` prepares it, but on the RPC devices ``remote``
    (a worker's answer replayed, e.g. with less free memory: the card a test wants) instead
    of asking the workers again."""
    from homelab.engine.llamacpp.kind import LlamaCpp
    from homelab.plan.card import card_for
    from homelab.serve.prepare import Prepared

    kind = LlamaCpp()
    plan = kind.plan(model, card_for(options), options, remote=remote)
    return Prepared(kind, plan, tuple(kind.argv(plan, options.engine.port, None)))


def serve_and_ask(
    model: str, options: Any, engines: list[int], path: str, body: dict, prepared: Any = None
) -> Served:
    """Serve ``model`` with no gate (the engine's pid kept for cleanup), POST ``body`` to the
    engine's ``path`` once, stop it: the plan it served, its argv, its log and the reply.
    ``prepared``: serve that planning of ``model`` (:func:`prepared_on`); None: plan it."""
    import httpx

    from homelab.serve.request import ServeRequest
    from homelab.serve.session import ServeSession

    session = ServeSession(ServeRequest(model, options, gate=None, prepared=prepared))
    try:
        session.start()
        engines.append(session.supervisor.pid)
        session.wait_ready()
        assert session.plan is not None
        plan = session.plan.plan
        argv = list(session.supervisor.spec.argv)
        lines = list(session.supervisor.attempt_lines())
        with httpx.Client(timeout=120) as client:
            reply = client.post(f"{session.supervisor.url}{path}", json=body)
        session.stop()
    finally:
        session.close()
    return Served(plan, argv, lines, reply)
