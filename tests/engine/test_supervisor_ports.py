"""Ports: a port held by another listener moves the engine to the next free one (said plainly),
or is an error when the user pinned it. Real sockets on 127.0.0.1, the real llama-server."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from homelab.cli.stop_status import word
from homelab.engine.llamacpp.diagnose import diagnose_llama_server
from homelab.engine.supervision.ports import PortChoice, choose_port, port_is_free, with_port
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.supervisor import State
from homelab.errors import EngineError

pytestmark = pytest.mark.engine
LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "llama_logs"


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 another program (this test) listens on; the next one is free."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65000 and port_is_free("127.0.0.1", port + 1):
            listener = socket.socket()
            try:
                listener.bind(("127.0.0.1", port))
            except OSError:
                listener.close()
                continue
            listener.listen(1)
            yield port
            listener.close()
            return
    pytest.fail("no port pair free on 127.0.0.1")


def test_taken_port_moves_to_the_next_free_one(supervise, held_port: int) -> None:
    supervisor = supervise(port=held_port)
    supervisor.start()
    ready = supervisor.wait_ready(120)
    choice = supervisor.port_choice
    assert choice is not None and choice.moved and choice.wanted == held_port
    assert choice.port > held_port
    note = choice.note()
    assert note.startswith(f"port {held_port} is in use") and note.endswith(
        f"using port {choice.port} instead"
    )
    assert ready.url == f"http://127.0.0.1:{choice.port}"
    assert httpx.get(f"{ready.url}/health", timeout=10, trust_env=False).status_code == 200
    assert StateFile().read().port == choice.port
    assert f"--port {choice.port}" in supervisor.log_path.read_text().splitlines()[0]


def test_pinned_taken_port_is_an_error(supervise, held_port: int) -> None:
    supervisor = supervise(port=held_port, port_pinned=True)
    with pytest.raises(EngineError) as caught:
        supervisor.start()
    assert caught.value.title == "Port in use"
    assert f"port {held_port} on 127.0.0.1 is in use" in caught.value.message
    assert "`port`" in caught.value.hint and "--port" not in caught.value.hint  # the setting
    assert "another --port" in word(caught.value.hint)  # ...as the CLI words it
    assert supervisor.pid is None and supervisor.events == [] and StateFile().read() is None


def test_choose_port_rules(held_port: int) -> None:
    assert choose_port("127.0.0.1", held_port + 1, pinned=True).port == held_port + 1
    moved = choose_port("127.0.0.1", held_port, pinned=False)
    assert moved.moved and moved.port == held_port + 1
    with pytest.raises(EngineError, match="all in use"):
        choose_port("127.0.0.1", held_port, pinned=False, span=0)
    with pytest.raises(EngineError, match="out of range"):
        choose_port("127.0.0.1", 70000, pinned=False)
    with pytest.raises(EngineError, match="not an address of this machine"):
        port_is_free("203.0.113.7", 8080)


def test_with_port_sets_or_appends_host_and_port() -> None:
    assert with_port(["s", "--host", "0.0.0.0", "--port", "1", "-lv", "4"], "127.0.0.1", 9) == [
        "s",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "-lv",
        "4",
    ]
    assert with_port(["s", "-m", "m"], "127.0.0.1", 9) == [
        "s",
        "-m",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
    ]


def test_bind_failure_in_the_engine_log_is_a_port_conflict() -> None:
    lines = (LOGS / "fail-port-in-use__c4096.log").read_text().splitlines()
    failure = diagnose_llama_server(lines, 1)
    assert failure.port_conflict and not failure.permanent
    assert failure.title == "Port in use" and "port 54767" in failure.message
    assert failure.quoted[0].startswith("start: couldn't bind HTTP server socket")


def test_engine_that_loses_the_port_race_restarts_at_once_on_a_free_port(
    supervise, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The port was free when checked but taken when the engine bound it: the real llama-server
    exits with "couldn't bind"; the supervisor (port not pinned) restarts at once on a free one.

    The race is made certain by letting the first check answer "free" for the held port.
    """
    import homelab.engine.supervision.supervisor as supervisor_module

    real = supervisor_module.choose_port
    calls = []

    def first_check_loses_the_race(host: str, wanted: int, *, pinned: bool) -> PortChoice:
        calls.append(wanted)
        return (
            PortChoice(host, held_port, held_port)
            if len(calls) == 1
            else real(host, wanted, pinned=pinned)
        )

    monkeypatch.setattr(supervisor_module, "choose_port", first_check_loses_the_race)
    supervisor = supervise(port=held_port)
    supervisor.start()
    ready = supervisor.wait_ready(120)
    states = [t.state for t in supervisor.events]
    assert states == [State.STARTING, State.CRASHED, State.RESTARTING, State.STARTING, State.READY]
    crashed = supervisor.events[1]
    assert crashed.failure.port_conflict and crashed.failure.title == "Port in use"
    assert f"port {held_port}" in crashed.failure.message
    assert "restart in 0.0 s" in supervisor.events[2].reason
    assert supervisor.port_choice.port > held_port and alive(ready.pid)
