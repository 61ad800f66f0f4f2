"""No orphans: a homelab killed with SIGKILL takes its engine along, unless the engine is detached.

A real homelab process (``supervisor_child.py``) supervises a real llama-server;
the test SIGKILLs that process. This test process is the child subreaper, so the
orphaned engine becomes its child and the way it died can be read with waitpid:
SIGKILL from the parent-death signal for an attached engine; still running for a
detached one, which ``homelab stop`` then stops.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import SCRIPT, script_env
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine
GONE_WITHIN_S = 30.0


def _start_homelab(model: Path, *extra: str) -> tuple[subprocess.Popen[str], dict]:
    """Run the supervisor script; (its process, {"pid": engine pid, "url": ...}) once ready."""
    child = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(model), str(free_port()), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=script_env(),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(child.stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=120)
    except queue.Empty:
        child.kill()
        pytest.fail(f"the supervisor script never said ready: {child.communicate()[1][-2000:]}")
    if not line:
        pytest.fail(f"the supervisor script exited: {child.communicate()[1][-2000:]}")
    return child, json.loads(line)


def _reap(pid: int, timeout_s: float) -> int | None:
    """waitpid status of our (adopted, as subreaper) child ``pid``; None if it still runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return status
        time.sleep(0.05)
    return None


def _kill9(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    child.stdout.close()
    child.stderr.close()


def test_sigkill_of_homelab_kills_its_engine(subreaper, engines, smollm2_gguf: Path) -> None:
    child, info = _start_homelab(smollm2_gguf)
    engine = info["pid"]
    engines.track(engine)
    assert alive(engine) and StateFile().read().pid == engine

    _kill9(child)
    status = _reap(engine, GONE_WITHIN_S)
    assert status is not None, (
        f"engine {engine} still runs {GONE_WITHIN_S} s after its homelab was killed"
    )
    assert (
        os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    )  # the parent-death signal
    assert not alive(engine)
    # homelab died without cleaning up: the record is stale, and the next look removes it
    assert StateFile().read() is not None
    assert StateFile().live() is None and not StateFile().path.exists()


def test_detached_engine_outlives_homelab_and_homelab_stop_stops_it(
    subreaper, engines, smollm2_gguf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    child, info = _start_homelab(smollm2_gguf, "--detach")
    engine = info["pid"]
    engines.track(engine)
    _kill9(child)
    assert _reap(engine, 2.0) is None and alive(engine)  # no parent-death signal: it lives on

    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["running"] is True and status["pid"] == engine and status["detached"] is True
    assert status["supervisor_pid"] is None  # its homelab is gone
    assert status["url"] == info["url"] and status["health"]["state"] == "ready"

    assert main(["stop"]) == 0
    assert f"stopped: llama-server pid {engine}" in capsys.readouterr().out
    exit_status = _reap(engine, GONE_WITHIN_S)
    assert exit_status is not None and not alive(engine)
    assert StateFile().read() is None
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"running": False}
