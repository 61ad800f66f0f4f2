"""Fixtures of the supervisor tests: real llama-server, small models, and nothing left running.

- ``engines``: every engine pid a test saw (supervisor transitions, state files,
  script output) is SIGKILLed at teardown if it still runs, so a failing test
  cannot leave a llama-server behind.
- ``supervise``: builds supervisors (SmolLM2 at ``-c 512`` by default, a free
  loopback port, short restart backoff) and stops each at teardown.
- ``subreaper``: makes this test process the reaper of orphaned descendants
  (``PR_SET_CHILD_SUBREAPER``), so an engine whose homelab was killed becomes
  our child and its death, and the signal that caused it, can be observed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from homelab.engine.llamacpp.diagnose import llama_server_profile
from homelab.engine.supervision.process import alive, create_time_of
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.supervisor import EngineSpec, RestartPolicy, Supervisor
from tests.factory.server_log import free_port

PR_SET_CHILD_SUBREAPER = 36
FAST = RestartPolicy(max_crashes=5, window_s=600, backoff_first_s=0.1, backoff_max_s=0.4)
"""Restart policy of the tests: the real limits, short waits."""


class Engines:
    """Pids (with start times) a test must not leave running."""

    def __init__(self) -> None:
        self._seen: dict[int, float | None] = {}

    def track(self, pid: int | None) -> None:
        if pid is not None and pid not in self._seen:
            self._seen[pid] = create_time_of(pid)

    def kill_leftovers(self) -> list[int]:
        _kill_keepers()  # first: a keeper would start a killed engine again
        left = []
        for pid, started in self._seen.items():
            if started is not None and alive(pid, started):
                left.append(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        return left


def _kill_keepers() -> None:
    """SIGKILL the keepers of this test's state folder (a failed test's detached serve)."""
    from tests.gate_serve.helpers import processes_with

    for process in processes_with("--keeper-fd"):
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
            process.wait(10)


@pytest.fixture
def engines() -> Iterator[Engines]:
    tracker = Engines()
    yield tracker
    left = tracker.kill_leftovers()
    assert not left, f"engines left running after the test (killed now): {left}"


def smol_argv(binary: Path, model: Path, *extra: str) -> tuple[str, ...]:
    """llama-server on ``model`` with a small context, at -lv 4 (the supervisor sets host/port)."""
    return (str(binary), "-m", str(model), "-c", "512", "-np", "1", "-lv", "4", *extra)


@pytest.fixture
def supervise(
    llama_server_bin: Path, smollm2_gguf: Path, engines: Engines
) -> Iterator[Callable[..., Supervisor]]:
    """``supervise(model=None, argv=None, policy=FAST, profile=None, state_file=True, **spec)``."""
    made: list[Supervisor] = []

    def make(
        model: Path | None = None,
        *,
        argv: tuple[str, ...] | None = None,
        policy: RestartPolicy = FAST,
        profile=None,
        state_file: bool = True,
        **spec: object,
    ) -> Supervisor:
        model = model or smollm2_gguf
        spec.setdefault("port", free_port())
        spec.setdefault("start_timeout_s", 120.0)
        supervisor = Supervisor(
            EngineSpec(argv=argv or smol_argv(llama_server_bin, model), model=str(model), **spec),
            profile or llama_server_profile(),
            policy=policy,
            state_file=StateFile() if state_file else None,
        )
        supervisor.subscribe(lambda t: engines.track(t.pid))
        made.append(supervisor)
        return supervisor

    yield make
    for supervisor in made:
        engines.track(supervisor.pid)
        if not supervisor.released:
            supervisor.stop()


def _set_subreaper(on: bool) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


@pytest.fixture
def subreaper() -> Iterator[None]:
    if not _set_subreaper(True):
        pytest.fail("cannot become a child subreaper (prctl failed)", pytrace=False)
    yield
    _set_subreaper(False)
