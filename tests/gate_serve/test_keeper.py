"""A detached serve is kept by homelab's keeper: real processes, the real llama-server
(SmolLM2) behind the real gate, on loopback.

``serve --detach`` returns once the keeper says the engine is ready and the gate listens;
the keeper restarts an engine or a gate that is SIGKILLed (the same public URL answers
again, ``status`` says what restarted), stops restarting a crash loop (``status`` says
why), and ``homelab stop`` ends keeper, gate and engine (checked by pid). A keeper that
is SIGKILLed leaves the engine serving; the next serve of the model adopts it under a
new keeper.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port
from tests.gate_serve.helpers import PLAN, chat, gate_processes, processes_with

pytestmark = pytest.mark.engine


def keeper_processes() -> list[psutil.Process]:
    """The keepers of this test's state folder."""
    return processes_with("--keeper-fd")


@pytest.fixture
def keepers() -> Iterator[None]:
    yield
    left = keeper_processes()
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    assert not left, f"keepers left running (killed now): {[p.pid for p in left]}"


def _status() -> dict:
    result = run_homelab("status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _until(check, what: str, timeout_s: float = 120.0):
    """Poll ``check`` until it returns something true (no timed assertion: a generous bound)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"never: {what}")


def _record_where(predicate):
    def look():
        record = StateFile().read()
        return record if record is not None and predicate(record) else None

    return look


def _serve(model: str, engines) -> tuple[int, object]:
    first, port = serve_on_a_free_port(model, *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    record = StateFile().read()
    assert record is not None
    engines.track(record.pid)
    assert "kept by homelab's keeper" in first.stdout
    return port, record


def _stop_leaves_nothing(pids: list[tuple[int, float | None]]) -> None:
    stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped: homelab's keeper pid" in stopped.stdout
    left = [pid for pid, started in pids if alive(pid, started)]
    assert not left, f"still running after stop: {left}"
    assert not keeper_processes() and not gate_processes()
    assert StateFile().read() is None


def test_the_keeper_restarts_a_killed_engine_and_gate(
    smollm2_gguf: Path, engines, gates, keepers
) -> None:
    port, record = _serve(str(smollm2_gguf), engines)
    public = f"http://127.0.0.1:{port}"
    keeper_pid = record.supervisor_pid
    assert record.kept and keeper_pid != os.getpid() and alive(keeper_pid)
    status = _status()
    assert status["keeper"] == {"pid": keeper_pid, "running": True}
    assert status["restarts"] == []
    assert f"kept by homelab's keeper (pid {keeper_pid})" in run_homelab("status").stdout

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")  # the same model
    assert again.returncode == 0, again.stderr
    assert f"already served at {public}" in again.stdout
    assert StateFile().read().pid == record.pid  # nothing started twice

    os.kill(record.pid, signal.SIGKILL)
    restarted = _until(
        _record_where(lambda r: r.pid != record.pid and r.ready_at is not None), "engine back"
    )
    engines.track(restarted.pid)
    assert restarted.kept and restarted.supervisor_pid == keeper_pid
    answer = chat(public)  # the same gate URL, the new engine behind it
    assert answer.status_code == 200, answer.text
    (engine_restart,) = _status()["restarts"]
    assert engine_restart["what"] == "engine" and engine_restart["returncode"] == -signal.SIGKILL
    assert "restarted engine at" in run_homelab("status").stdout

    gate_pid = restarted.gate_pid
    assert gate_pid is not None
    os.kill(gate_pid, signal.SIGKILL)
    regated = _until(
        _record_where(lambda r: r.gate_pid not in (None, gate_pid) and r.gate_alive()),
        "gate back",
    )
    assert regated.gate_url == public
    assert chat(public).status_code == 200
    whats = [r["what"] for r in _status()["restarts"]]
    assert whats == ["engine", "gate"]

    pids = [(keeper_pid, record.supervisor_create_time), (restarted.pid, restarted.create_time)]
    pids.append((regated.gate_pid, regated.gate_create_time))
    _stop_leaves_nothing(pids)


def test_a_killed_keeper_leaves_the_engine_serving_and_serve_repairs(
    smollm2_gguf: Path, engines, gates, keepers
) -> None:
    port, record = _serve(str(smollm2_gguf), engines)
    public = f"http://127.0.0.1:{port}"
    os.kill(record.supervisor_pid, signal.SIGKILL)
    _until(lambda: not alive(record.supervisor_pid, record.supervisor_create_time), "keeper gone")
    assert record.engine_alive()
    assert chat(public).status_code == 200  # engine and gate serve on without it
    status = _status()
    assert status["keeper"] == {"pid": record.supervisor_pid, "running": False}
    assert "keeper" in run_homelab("status").stdout and "is gone" in run_homelab("status").stdout

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "adopting the running detached llama-server" in again.stdout
    after = StateFile().read()
    assert after.pid == record.pid and after.kept
    assert after.supervisor_pid not in (None, record.supervisor_pid)
    assert alive(after.supervisor_pid, after.supervisor_create_time)
    assert _status()["keeper"]["running"] is True

    os.kill(after.pid, signal.SIGKILL)  # the new keeper restarts what it adopted
    back = _until(
        _record_where(lambda r: r.pid != after.pid and r.ready_at is not None), "engine back"
    )
    engines.track(back.pid)
    assert chat(public).status_code == 200
    pids = [(after.supervisor_pid, after.supervisor_create_time), (back.pid, back.create_time)]
    _stop_leaves_nothing(pids)


def test_a_crash_loop_ends_the_keeper_and_status_says_why(
    smollm2_gguf: Path, tmp_path: Path, engines, gates, keepers
) -> None:
    model = tmp_path / "model.gguf"
    shutil.copyfile(smollm2_gguf, model)
    port, record = _serve(str(model), engines)
    keeper = (record.supervisor_pid, record.supervisor_create_time)
    model.write_bytes(b"not a gguf any more" * 64)  # every restart fails the same way
    os.kill(record.pid, signal.SIGKILL)
    _until(lambda: not alive(*keeper), "the keeper gives up", timeout_s=300)
    assert StateFile().read() is None
    status = _status()
    assert status["running"] is False
    end = status["keeper_end"]
    assert end is not None and end["model"] == str(model)
    assert "not restarting" in end["why"] or "crash loop" in end["why"]
    assert end["restarts"][0]["what"] == "engine"
    human = run_homelab("status").stdout
    assert "homelab's keeper of" in human and "stopped at" in human
    assert not gate_processes()
