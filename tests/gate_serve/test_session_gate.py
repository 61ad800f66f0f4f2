"""The gate as a part of the serve session (the domain under ``homelab serve`` and the TUI):
its events in order, the record naming it, a restart that keeps it in front of the engine,
and a public port lost while the engine started: the engine is stopped, never left."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import httpx
import pytest

from homelab.engine.options import plan_options
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.states import RestartPolicy
from homelab.errors import ExitCode, HomelabError
from homelab.gate.config_file import GateChoices
from homelab.serve import events as ev
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.engine.test_serve_session import _names
from tests.factory.server_log import free_port
from tests.gate_serve.helpers import chat

pytestmark = pytest.mark.engine
FAST = RestartPolicy(max_crashes=5, window_s=600, backoff_first_s=0.1, backoff_max_s=0.4)


def _session(model: Path, port: int, **request: object) -> ServeSession:
    options = plan_options(vram=8 << 30, ctx=512, slots=1, port=port)
    return ServeSession(
        ServeRequest(str(model), options, gate=GateChoices(), **request), policy=FAST
    )


def test_gate_events_record_and_a_restart_behind_it(smollm2_gguf: Path, engines) -> None:
    port = free_port()
    session = _session(smollm2_gguf, port)
    seen: list = []
    session.subscribe(seen.append)
    try:
        session.start()
        engines.track(session.supervisor.pid)
        session.wait_ready()
        gate_url = f"http://127.0.0.1:{port}"
        assert session.public_url == gate_url != session.supervisor.url
        record = StateFile().read()
        assert record.gate_url == gate_url and record.gate_pid == os.getpid()
        assert record.port_pinned  # the engine's port is held for the gate across restarts
        assert chat(gate_url).status_code == 200

        first = session.supervisor.pid
        os.kill(first, signal.SIGKILL)  # a crash: the supervisor restarts it, same port
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            again = StateFile().read()
            if again is not None and again.pid != first and again.ready_at is not None:
                break
            time.sleep(0.1)
        engines.track(again.pid)
        assert again.port == record.port and again.gate_url == gate_url  # named again
        assert chat(gate_url).status_code == 200  # the gate reaches the new engine
        session.stop()
    finally:
        session.end()
        session.close()
    names = _names(seen)
    ready = names.index("Ready")
    assert names[ready : ready + 3] == ["Ready", "Actuals", "GateStarted"]
    assert names[-4:] == [
        "GateStopped",
        "EngineChanged(stopping)",
        "EngineChanged(stopped)",
        "Stopped",
    ]
    started = next(e for e in seen if isinstance(e, ev.GateStarted))
    assert started.url == gate_url and started.engine_url == record.url
    assert (started.budget, started.ceiling, started.max_concurrent) == (512, 512, 1)
    assert not started.detached and StateFile().read() is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{gate_url}/health", timeout=5, trust_env=False)


def test_a_public_port_taken_while_the_engine_started_stops_it(smollm2_gguf: Path, engines) -> None:
    port = free_port()
    session = _session(smollm2_gguf, port)
    seen: list = []
    session.subscribe(seen.append)
    with socket.socket() as holder:
        try:
            session.start()  # the public port was free when it looked
            pid = session.supervisor.pid
            engines.track(pid)
            holder.bind(("127.0.0.1", port))  # taken before the gate could listen
            holder.listen()
            with pytest.raises(HomelabError) as caught:
                session.wait_ready()
        finally:
            session.end()
            session.close()
    error = caught.value
    assert error.exit_code == ExitCode.ENGINE and f"127.0.0.1:{port}" in error.message
    assert "in use" in error.message
    assert not alive(pid) and StateFile().read() is None  # no engine without its gate
    assert isinstance(seen[-1], ev.Failed) and seen[-1].error is error
