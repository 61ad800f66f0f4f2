"""The foreground gate's errors in the terminal: one line each, rate-limited (a traceback
with the first of a kind a window), as the detached gate's log is — never aiohttp's
traceback per bad request. A process of its own (as ``homelab serve`` is: pytest's own
log capture would hide what a terminal shows) starts the gate the way the foreground
serve does (:func:`homelab.gate.log_file.log_to_terminal`, then a
:class:`~homelab.gate.runner.GateRunner` in front of the real llama-server), sends it
1,000 requests aiohttp cannot parse and makes 1,000 callbacks on its event loop raise;
its stderr is counted.

Issue 22: a bad request printed ~30 lines of traceback in the serve terminal (1,000 bad
requests ≈ 8,000 lines)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from homelab.gate.log_file import RateLimit, log_to_terminal

ROOT = Path(__file__).resolve().parents[2]
FLOOD = 1000
SCRIPT = textwrap.dedent(
    """
    import socket, sys, threading
    from homelab.gate.log_file import log_to_terminal
    from homelab.gate.runner import GateRunner
    from homelab.gate.settings import GateSettings

    log_to_terminal()  # what homelab serve does before its foreground gate
    runner = GateRunner(GateSettings(port=0), sys.argv[1], None)
    host, port = runner.start().removeprefix("http://").rsplit(":", 1)
    bad = b"GET /health HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nBad Header: x\\r\\n\\r\\n"
    for _ in range(int(sys.argv[2])):
        with socket.create_connection((host, int(port)), timeout=60) as s:
            s.sendall(bad)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.0 400"), answer
    done = threading.Event()

    def boom():
        raise RuntimeError("a callback of the gate's loop failed")

    for _ in range(int(sys.argv[2])):
        runner._loop.call_soon_threadsafe(boom)
    runner._loop.call_soon_threadsafe(done.set)
    done.wait(60)
    runner.stop()
    print("sent", flush=True)
    """
)


@pytest.mark.engine
def test_a_flood_of_bad_requests_is_a_few_lines_in_the_terminal(engine) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, engine, str(FLOOD)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0 and "sent" in done.stdout, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    said = [line for line in lines if line.startswith("homelab gate ")]
    unread = [line for line in said if "could not read" in line]
    callbacks = [line for line in said if "callback" in line]
    # 10 of a kind a minute: a slow machine may span a few minutes, never 1,000 lines
    assert 1 <= len(unread) <= 50, said
    assert 1 <= len(callbacks) <= 50, said
    assert done.stderr.count("Traceback") <= 5  # the first callback's, once a window
    assert len(lines) <= 200, lines[:40]
    assert "Bad Header" not in done.stderr  # the request is never echoed


def test_log_to_terminal_is_one_handler_however_often_called() -> None:
    first = log_to_terminal()
    try:
        assert log_to_terminal() is first
        assert any(isinstance(f, RateLimit) for f in first.filters)
        assert first in logging.getLogger("homelab.gate").handlers
        assert first in logging.getLogger("aiohttp").handlers
        assert first.level == logging.WARNING
    finally:
        for name in ("homelab.gate", "aiohttp"):
            logging.getLogger(name).removeHandler(first)
