"""Readiness, transitions and a clean stop, on the real llama-server (SmolLM2-135M, -c 512).

Ready means /health answers 200 AND the log said "listening on"; each half alone
must not be enough, which two profiles that break one half prove against the
same real engine.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace

import httpx
import pytest

from homelab.cli.stop_status import word
from homelab.engine.llamacpp.diagnose import llama_server_profile
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.supervisor import State
from homelab.errors import EngineError

pytestmark = pytest.mark.engine


def test_ready_then_clean_stop(supervise) -> None:
    seen = []
    supervisor = supervise()
    supervisor.subscribe(seen.append)
    supervisor.start()
    pid = supervisor.pid
    ready = supervisor.wait_ready(120)

    assert supervisor.state is State.READY and ready.pid == pid
    assert ready.url == supervisor.url == f"http://127.0.0.1:{supervisor.spec.port}"
    response = httpx.get(f"{ready.url}/health", timeout=10, trust_env=False)
    assert response.status_code == 200 and response.json() == {"status": "ok"}
    # the log said it serves, in this attempt's lines (after homelab's marker line)
    assert any(
        re.search(r"listening on http://127\.0\.0\.1:\d+", line)
        for line in supervisor.attempt_lines()
    )
    log_text = supervisor.log_path.read_text()
    assert log_text.startswith("---- homelab ") and " attempt 1: " in log_text.splitlines()[0]
    # its own process group and session: a Ctrl-C at the terminal reaches homelab only
    assert os.getpgid(pid) == pid and os.getsid(pid) != os.getsid(0)
    record = StateFile().read()
    assert record is not None and record.pid == pid and record.port == supervisor.spec.port
    assert (
        record.ready_at is not None and record.supervisor_pid == os.getpid() and not record.detached
    )

    supervisor.stop()
    assert supervisor.state is State.STOPPED
    assert not alive(pid)
    assert StateFile().read() is None
    states = [(t.previous, t.state) for t in supervisor.events]
    assert states == [
        (State.STOPPED, State.STARTING),
        (State.STARTING, State.READY),
        (State.READY, State.STOPPING),
        (State.STOPPING, State.STOPPED),
    ]
    assert seen == supervisor.events  # subscribers saw every transition, in order
    times = [t.monotonic for t in supervisor.events]
    assert times == sorted(times) and all(t.at > 0 for t in supervisor.events)
    assert all(t.failure is None for t in supervisor.events)


def _engine_answers_health(url: str, timeout_s: float = 120) -> bool:
    """Poll the engine's real /health (bounded) until 200: llama-server's own "ready"."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5, trust_env=False).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    return False


def _stays_starting(supervisor, seconds: float) -> bool:
    """True when the supervisor is still STARTING after ``seconds`` (health polls reach 0.5 s)."""
    supervisor.wait_stopped(seconds)
    return supervisor.state is State.STARTING


def test_health_ok_without_the_serving_line_is_not_ready(supervise) -> None:
    profile = replace(
        llama_server_profile(), serving_line=re.compile(r"this line is never printed")
    )
    supervisor = supervise(profile=profile)
    supervisor.start()
    assert _engine_answers_health(supervisor.url), "llama-server itself never answered /health"
    assert _stays_starting(supervisor, 2.0)
    supervisor.stop()
    assert State.READY not in [t.state for t in supervisor.events]


def test_serving_line_without_health_ok_is_not_ready(supervise) -> None:
    profile = replace(llama_server_profile(), health_path="/no-such-endpoint")
    supervisor = supervise(profile=profile)
    supervisor.start()
    assert _engine_answers_health(supervisor.url)
    deadline = time.monotonic() + 60  # the log reader may lag the engine on a loaded machine
    while not any("listening on" in line for line in supervisor.tail(400)):
        assert time.monotonic() < deadline, "the serving line never reached the log tail"
        time.sleep(0.1)
    assert _stays_starting(supervisor, 2.0)
    supervisor.stop()
    assert State.READY not in [t.state for t in supervisor.events]


def test_start_timeout_stops_the_engine_and_quotes_its_log(supervise) -> None:
    profile = replace(
        llama_server_profile(), serving_line=re.compile(r"this line is never printed")
    )
    supervisor = supervise(profile=profile, start_timeout_s=4.0)
    supervisor.start()
    pid = supervisor.pid
    with pytest.raises(EngineError) as caught:
        supervisor.wait_ready(120)
    assert caught.value.title == "Engine start timed out"
    assert "llama-server did not become ready within 4 s (stopped it)" in caught.value.message
    assert "the engine said:" in caught.value.message  # its last log lines follow
    quoted = supervisor.failure.quoted
    log_text = supervisor.log_path.read_text()
    assert quoted and all(line in log_text and line in caught.value.message for line in quoted)
    assert (
        "`start_timeout` 8" in caught.value.hint and str(supervisor.log_path) in caught.value.hint
    )
    assert "--start-timeout 8" in word(caught.value.hint)
    assert not alive(pid)
    assert [t.state for t in supervisor.events][-2:] == [State.STOPPING, State.STOPPED]
    assert StateFile().read() is None


def test_stop_while_starting_and_second_start_refused(supervise) -> None:
    supervisor = supervise()
    supervisor.start()
    pid = supervisor.pid
    supervisor.stop()  # right away: the engine may still be loading (SIGTERM then is ignored)
    assert not alive(pid)
    assert supervisor.state is State.STOPPED
    with pytest.raises(EngineError, match="already started"):
        supervisor.start()


def test_release_refused_for_an_attached_engine(supervise) -> None:
    supervisor = supervise()
    supervisor.start()
    supervisor.wait_ready(120)
    with pytest.raises(EngineError, match="only a detached engine"):
        supervisor.release()
    assert supervisor.state is State.READY
