"""The engine status poller and the loopback client against the real llama-server.

A SmolLM2 server (``--metrics``, 2 slots) runs on 127.0.0.1 for this module; nothing but
these tests talks to it, so the counters' deltas the poller publishes must add up to
exactly the completions the tests send. The proxy test sets HTTP_PROXY, HTTPS_PROXY and
ALL_PROXY to a dead loopback port: a client that honoured them could not reach the
server (the test shows a plain httpx client failing), ours must not notice.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from homelab.engine.llamacpp.client import HealthState, LiveStatus, LlamaServerClient
from homelab.engine.llamacpp.status_poller import StatusPoller
from homelab.engine.loopback import NotLoopbackError, is_loopback_url, loopback_client
from homelab.engine.supervision.readiness import check_health, health_client
from tests.engine.live_server import SERVER_ARGS, chat, serve
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine

WAIT_S = 60.0  # a bound for a loaded machine, never an expectation
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(scope="module")
def server(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from serve(
        llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("poll"), [*SERVER_ARGS, "--metrics"]
    )


class Collected:
    """A poller's events, in order."""

    def __init__(self, poller: StatusPoller) -> None:
        self.events: queue.Queue[LiveStatus] = queue.Queue()
        self.subscription = poller.subscribe(self.events.put, queue_size=10_000)

    def next(self) -> LiveStatus:
        return self.events.get(timeout=WAIT_S)

    def until(self, condition) -> list[LiveStatus]:
        seen = [self.next()]
        while not condition(seen[-1]):
            seen.append(self.next())
        return seen


def test_token_rates_come_from_the_counters_around_a_real_completion(server: str) -> None:
    poller = StatusPoller(server, interval_s=0.2)
    got = Collected(poller)
    with poller:
        first = got.next()  # the poll start() made: nothing to compare its counters with yet
        answer = chat(server, "Name a winter soup.", max_tokens=8)
        answered_at = time.time()
        # every status until one scraped after the answer came back: their windows cover it
        events = got.until(lambda s: s.taken_at > answered_at)
    assert first.health.ready and first.metrics is not None and first.window is None
    timings = answer["timings"]
    windows = [s.window for s in events]
    assert all(w is not None for w in windows)
    # the deltas between consecutive polls add up to the one completion, token for token
    assert sum(w.predicted_tokens for w in windows) == timings["predicted_n"] > 0
    assert sum(w.prompt_tokens for w in windows) == timings["prompt_n"] > 0
    assert sum(w.cached_tokens for w in windows) == timings["cache_n"]
    generating = [s for s in events if s.window.predicted_tokens]
    assert generating and all(s.window.gen_tps > 0 for s in generating)
    assert all(
        s.gen_tps == s.window.gen_tps for s in generating
    )  # the status's rate is the window's
    assert all(s.window_s is not None and s.window_s > 0 for s in events)
    prompted = [s for s in events if s.window.prompt_tokens]
    assert events[-1].cache_reuse == prompted[-1].window.cache_reuse is not None
    last = events[-1]
    assert last.processing == 0 and last.deferred == 0
    assert last.kv_per_slot is not None and len(last.kv_per_slot) == 2
    assert sum(cells for _, cells, _ in last.kv_per_slot) == last.kv_tokens > 0
    assert all(n_ctx == 2048 for _, _, n_ctx in last.kv_per_slot)
    assert poller.polls >= len(events) + 1


def test_a_url_function_skips_rounds_without_an_engine(server: str) -> None:
    target: list[str | None] = [None]
    poller = StatusPoller(lambda: target[0], interval_s=0.1)
    got = Collected(poller)
    poller.start()
    try:
        assert poller.latest is None and poller.polls == 0
        target[0] = server
        status = got.next()
        assert status.url == server and status.health.ready
        dead = f"http://127.0.0.1:{free_port()}"
        target[0] = dead
        moved = got.until(lambda s: s.url == dead)[-1]
        assert moved.health.state is HealthState.DOWN and moved.window is None
    finally:
        poller.stop()
    assert not got.subscription.alive
    assert not any(t.name == "homelab-engine-status" for t in threading.enumerate())


def test_loopback_calls_ignore_proxy_settings(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in PROXY_VARS:
        monkeypatch.setenv(name, dead_proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    # the control: a client that reads the environment sends this loopback call to the proxy
    with pytest.raises((httpx.ConnectError, httpx.ProxyError)):  # the proxy port is dead
        httpx.get(f"{server}/health", timeout=5)

    with health_client() as client:
        answer = check_health(client, server)
    assert answer.ok and answer.status_code == 200
    with LlamaServerClient(server) as client:
        assert client.health().ready
        status = client.snapshot()
    assert status.slots is not None and status.metrics is not None and not status.notes
    with StatusPoller(server, interval_s=0.2) as poller:
        polled = poller.wait(lambda s: s.window is not None, WAIT_S)
    assert polled is not None and polled.health.ready and polled.metrics is not None


def test_only_loopback_addresses_are_spoken_to() -> None:
    for url in ("http://127.0.0.1:8080", "http://[::1]:8080/", "http://localhost:1"):
        assert is_loopback_url(url), url
    for url in (
        "http://10.0.0.1:8080",
        "http://127.0.0.1.nip.io:8080",
        "http://127.0.0.1@example.com:8080",
        "file:///etc/passwd",
        "not a url",
    ):
        assert not is_loopback_url(url), url
        with pytest.raises(NotLoopbackError):
            LlamaServerClient(url)
        with pytest.raises(NotLoopbackError):
            StatusPoller(url)
    # a whole URL in a request is checked too, before anything connects
    with loopback_client() as client, pytest.raises(NotLoopbackError) as raised:
        client.get("http://192.0.2.1/health")
    assert raised.value.exit_code == 6 and "127.0.0.1" in (raised.value.hint or "")
    with health_client() as client, pytest.raises(NotLoopbackError):
        check_health(client, "http://192.0.2.1:8080")
