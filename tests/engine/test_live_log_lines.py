"""Live supervisor events on the real llama-server: transitions and log lines, never blocking.

The supervisor runs with HTTP_PROXY/HTTPS_PROXY/ALL_PROXY set to a dead loopback port, so
its readiness health checks prove they ignore proxy settings end to end. One live
subscriber is stuck in its first call for the whole start: the engine must still become
ready (a subscriber that held the log follower up would hide the serving line forever).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from homelab.cli.serve_output import StatusLine, watch_status
from homelab.engine.llamacpp.client import LlamaServerClient, status_line
from homelab.engine.supervision.attempt_log import LogLine
from homelab.engine.supervision.supervisor import State, Supervisor, Transition
from homelab.events import Subscription
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine

WAIT_S = 120.0  # a bound for a loaded machine, never an expectation
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def test_log_lines_and_transitions_reach_live_subscribers_in_order(
    supervise: Callable[..., Supervisor], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in PROXY_VARS:
        monkeypatch.setenv(name, dead_proxy)
    supervisor = supervise()
    gate, entered = threading.Event(), threading.Event()

    def stuck(event: object) -> None:
        entered.set()
        gate.wait()

    seen: list[Transition | LogLine] = []
    stuck_sub = supervisor.subscribe(stuck, log_lines=True)
    live = supervisor.subscribe(seen.append, log_lines=True)
    assert isinstance(live, Subscription) and isinstance(stuck_sub, Subscription)
    started = time.time()
    try:
        supervisor.start()
        ready = supervisor.wait_ready(WAIT_S)  # while the other subscriber is stuck
        assert entered.wait(WAIT_S) and stuck_sub.delivered == 0
        assert live.flush(WAIT_S)
    finally:
        gate.set()
    lines = [e for e in seen if isinstance(e, LogLine)]
    transitions = [e for e in seen if isinstance(e, Transition)]
    assert [t.state for t in transitions] == [State.STARTING, State.READY]
    assert transitions == supervisor.events and transitions[-1] is ready
    serving = next(
        i for i, e in enumerate(seen) if isinstance(e, LogLine) and "listening" in e.text
    )
    assert supervisor.profile.is_serving(seen[serving].text)  # type: ignore[union-attr]
    assert serving < seen.index(ready)  # the serving line was heard before READY
    assert all(line.attempt == 1 for line in lines) and len(lines) > 10
    assert all(started <= line.at <= time.time() for line in lines)
    assert [line.at for line in lines] == sorted(line.at for line in lines)
    # exactly the engine's lines, in file order: the marker homelab writes is not one of them
    assert supervisor.log_path is not None
    written = supervisor.log_path.read_text(errors="replace").splitlines()
    assert written[0].startswith("---- homelab ") and " attempt 1: " in written[0]
    assert [line.text for line in lines] == written[1 : len(lines) + 1]
    assert live.dropped == 0

    supervisor.stop()
    assert [e.state for e in seen if isinstance(e, Transition)][-2:] == [
        State.STOPPING,
        State.STOPPED,
    ]
    assert not live.alive and not stuck_sub.alive  # stop() ended the delivery threads
    assert stuck_sub.delivered + stuck_sub.dropped == len(seen)


def test_watch_status_renders_the_status_poller(
    supervise: Callable[..., Supervisor],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(StatusLine, "_instance", None)  # a fresh line: stdout is not a tty here
    supervisor = supervise()
    supervisor.start()
    supervisor.wait_ready(WAIT_S)
    failures: list[BaseException] = []

    def watch() -> None:
        try:
            watch_status(supervisor, kv_unified=False)
        except BaseException as error:  # reported by the test, not lost in a thread
            failures.append(error)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out = ""
    deadline = time.monotonic() + WAIT_S
    while "\n" not in out and time.monotonic() < deadline and watcher.is_alive():
        time.sleep(0.05)  # waiting for output, not timing it
        out += capsys.readouterr().out
    assert supervisor.url is not None
    with LlamaServerClient(supervisor.url) as client:
        expected = status_line(client.snapshot(kv_unified=False))
    supervisor.stop()
    watcher.join(WAIT_S)
    assert not watcher.is_alive() and not failures
    out += capsys.readouterr().out
    # an idle server without --metrics: the same line the old loop printed, once a minute
    assert out.splitlines() == [expected]
    assert expected.startswith("ready · 0 processing · ? deferred · prompt – t/s · gen – t/s")
    assert "KV 0/512 tok (0%)" in expected and "slots 0/1 busy" in expected
