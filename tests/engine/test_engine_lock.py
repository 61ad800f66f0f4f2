"""The machine-wide engine lock: a wait for another build's lock ends at once when the
progress callback raises (the TUI's cancel), and by itself when the other build lets go;
the command line says the waiting line once however long the wait."""

from __future__ import annotations

import fcntl
import io
import threading
from pathlib import Path

import pytest

from homelab.cli import engine_cmd
from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.install import engine_lock

WAITING = "waiting for another homelab engine build to finish"
BOUND_S = 30.0
"""How long a test waits for the waiting thread before calling it stuck (not a speed claim)."""


class Cancelled(Exception):
    pass


@pytest.fixture
def held(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The lock ``.test.lock``, held by "another homelab" (its own open file) until released."""
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    root = locate.engine_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".test.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)
        yield other
        fcntl.flock(other, fcntl.LOCK_UN)


def _wait_in_thread(progress) -> tuple[threading.Thread, list[str]]:
    outcome: list[str] = []

    def wait() -> None:
        try:
            with engine_lock("test", progress, WAITING):
                outcome.append("held")
        except Cancelled:
            outcome.append("cancelled")

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, outcome


def test_a_cancel_ends_the_wait_while_the_other_build_still_holds_the_lock(held) -> None:
    cancel, said = threading.Event(), threading.Event()

    def progress(_fraction: float | None, line: str) -> None:
        assert line == WAITING
        said.set()
        if cancel.is_set():
            raise Cancelled

    thread, outcome = _wait_in_thread(progress)
    assert said.wait(BOUND_S)  # it says it waits
    cancel.set()
    thread.join(BOUND_S)
    assert not thread.is_alive() and outcome == ["cancelled"]  # the lock never taken
    with pytest.raises(BlockingIOError):  # still the other's
        fcntl.flock(open(held.name), fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_wait_ends_when_the_other_build_lets_go(held) -> None:
    said = threading.Event()
    thread, outcome = _wait_in_thread(lambda _f, _line: said.set())
    assert said.wait(BOUND_S)
    assert outcome == []  # still waiting
    fcntl.flock(held, fcntl.LOCK_UN)
    thread.join(BOUND_S)
    assert not thread.is_alive() and outcome == ["held"]


def test_the_command_line_says_a_repeated_line_once() -> None:
    out = io.StringIO()
    printer = engine_cmd.ProgressPrinter(out, tty=False)
    for _ in range(5):
        printer(None, WAITING)
    printer(0.5, "[ 50%] Building x")
    printer(None, WAITING)  # said again after another line: said again
    printer.close()
    assert out.getvalue().splitlines() == [WAITING, "[ 50%] Building x", WAITING]
