"""homelab.engine.llamacpp.client / metrics / server_answers against the real llama-server.

A SmolLM2 server runs on 127.0.0.1 for this module (``--metrics``, 2 slots of 2,048
tokens); the tests send it a bounded number of small chat completions and check that
``/metrics``, ``/slots`` and the status line reflect exactly those requests. Loading is
observed on a server whose model file is a FIFO nobody writes (llama-server opens its
HTTP port first, then blocks opening the model): /health answers 503 for as long as
the test wants. Every process started here is killed before the test ends.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from homelab.engine.llamacpp.client import (
    EngineUnavailableError,
    HealthState,
    LlamaServerClient,
    status_line,
)
from homelab.engine.llamacpp.locate import LLAMA_CPP_COMMIT
from homelab.engine.llamacpp.metrics import (
    window,
)
from tests.engine.live_server import (
    REQUEST_TIMEOUT_S,
    SERVER_ARGS,
    START_TIMEOUT_S,
    chat,
    serve,
    start_server,
)
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def server(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from serve(
        llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("live"), [*SERVER_ARGS, "--metrics"]
    )


def _count(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def cache_reuse(response_json: object) -> tuple[int, int] | None:
    """``(cache_n, prompt_n)`` of a completion response: prompt tokens reused from the
    cache and prompt tokens processed. A completion's ``timings`` carry them
    (``/completion``, the OpenAI endpoints, the last stream chunk); else OpenAI ``usage``
    does (``prompt_tokens_details.cached_tokens``); None when the response has neither."""
    if not isinstance(response_json, dict):
        return None
    timings = response_json.get("timings")
    if isinstance(timings, dict):
        cache_n, prompt_n = _count(timings.get("cache_n")), _count(timings.get("prompt_n"))
        if cache_n is not None and prompt_n is not None:
            return cache_n, prompt_n
    usage = response_json.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens_details"), dict):
        cached = _count(usage["prompt_tokens_details"].get("cached_tokens"))
        total = _count(usage.get("prompt_tokens"))
        if cached is not None and total is not None and total >= cached:
            return cached, total - cached
    return None


# -- against the running server ---------------------------------------------------------


def test_ready_server_health_props_and_slots(server: str, smollm2_gguf: Path) -> None:
    with LlamaServerClient(server) as client:
        health = client.health()
        assert health.state is HealthState.READY and health.http_status == 200 and health.ready
        props = client.props()
        assert props.total_slots == 2 and props.n_ctx_per_slot == 2048
        assert props.model_path == str(smollm2_gguf)
        assert props.build_info is not None and props.build_info.endswith(LLAMA_CPP_COMMIT)
        assert props.is_sleeping is False
        slots = client.slots()
    assert [s.id for s in slots] == [0, 1]
    assert all(s.n_ctx == 2048 and not s.is_processing for s in slots)


def test_requests_show_in_metrics_slots_and_status(server: str) -> None:
    with LlamaServerClient(server) as client:
        before = client.metrics()
        client.snapshot()
        answers = [
            chat(server, q)
            for q in ("Name a winter soup.", "When to plant tulips?", "Oil a chain how?")
        ]
        after = client.metrics()
        status = client.snapshot()
    timings = [a["timings"] for a in answers]
    counted = window(before, after)
    assert counted.prompt_tokens == sum(t["prompt_n"] for t in timings)
    assert counted.cached_tokens == sum(t["cache_n"] for t in timings)
    assert counted.predicted_tokens == sum(t["predicted_n"] for t in timings) > 0
    assert after.n_decode_total > before.n_decode_total
    assert after.requests_processing == 0 and after.requests_deferred == 0
    assert counted.prompt_tps is not None and counted.gen_tps is not None
    # every figure this build prints is read; the removed KV gauges are unknown, not 0
    assert after.kv_cache_usage_ratio is None and after.kv_cache_tokens is None
    for name in (
        "prompt_tokens_total",
        "tokens_predicted_total",
        "prompt_tokens_seconds",
        "predicted_tokens_seconds",
        "requests_processing",
        "requests_deferred",
        "n_decode_total",
    ):
        assert getattr(after, name) is not None, name

    used = [s for s in status.slots if s.id_task is not None]
    assert used and all(s.tokens > 0 for s in used)
    assert status.kv_tokens == sum(s.tokens for s in status.slots) > 0
    assert status.kv_capacity == 4096 and status.processing == 0 and status.busy_slots == 0
    assert status.prompt_tps is not None and status.gen_tps is not None
    line = status_line(status)
    assert line.startswith("ready · 0 processing · 0 deferred · prompt ")
    assert (
        f"KV {status.kv_tokens:,}/4,096 tok" in line and "slots 0/2 busy" in line and "gen " in line
    )


def test_shared_prefix_shows_cache_reuse(server: str) -> None:
    with LlamaServerClient(server) as client:
        chat(server, "What should I cook on a cold evening?")
        client.snapshot()
        second = chat(server, "What should I cook on a hot evening?")
        status = client.snapshot()
    reuse = cache_reuse(second)
    assert reuse is not None
    cached, processed = reuse
    assert (
        cached >= 40 and processed >= 1
    )  # the system prompt and most of the question came from the cache
    assert (cached, processed) == (second["timings"]["cache_n"], second["timings"]["prompt_n"])
    usage_only = {k: v for k, v in second.items() if k != "timings"}
    assert cache_reuse(usage_only) == reuse  # OpenAI usage.prompt_tokens_details agrees
    assert status.cache_reuse == reuse  # the metrics window around the one request says the same
    assert f"cache {cached:,}/{cached + processed:,} prompt tok reused" in status_line(status)


def test_concurrent_requests_are_seen_processing_and_deferred(server: str) -> None:
    """Three long generations on two slots: while they run, snapshots see both slots busy
    and the third request waiting."""
    done: list[dict] = []
    errors: list[Exception] = []

    def generate(question: str) -> None:
        body = {"prompt": question, "n_predict": 64, "ignore_eos": True, "cache_prompt": False}
        try:
            response = httpx.post(f"{server}/completion", json=body, timeout=REQUEST_TIMEOUT_S)
            done.append(response.json())
        except (httpx.HTTPError, ValueError) as error:  # reported by the test, not lost in a thread
            errors.append(error)

    threads = [threading.Thread(target=generate, args=(f"Story number {i}:",)) for i in range(3)]
    seen = []
    with LlamaServerClient(server, timeout_s=REQUEST_TIMEOUT_S) as client:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            seen.append(client.snapshot())
            time.sleep(0.2)
        for thread in threads:
            thread.join(timeout=REQUEST_TIMEOUT_S)
        idle = client.snapshot()
    assert not errors, errors
    assert len(done) == 3 and all(d["tokens_predicted"] == 64 for d in done)
    assert max(s.processing or 0 for s in seen) == 2
    assert max(s.busy_slots or 0 for s in seen) == 2
    assert max(s.deferred or 0 for s in seen) >= 1
    busy = next(s for s in seen if s.busy_slots == 2)
    assert "slots 2/2 busy" in status_line(busy)
    assert idle.processing == 0 and idle.deferred == 0 and idle.busy_slots == 0


def test_legacy_completion_timings(server: str) -> None:
    body = {"prompt": "The capital of France is", "n_predict": 2, "cache_prompt": True}
    first = httpx.post(f"{server}/completion", json=body, timeout=REQUEST_TIMEOUT_S).json()
    again = httpx.post(f"{server}/completion", json=body, timeout=REQUEST_TIMEOUT_S).json()
    assert cache_reuse(first) is not None
    cached, processed = cache_reuse(again)
    assert cached > 0 and processed >= 1 and cached + processed == first["tokens_evaluated"]
    assert (
        cache_reuse({"content": "no timings"}) is None and cache_reuse(["not", "a", "dict"]) is None
    )


# -- loading, down, unresponsive, not llama-server --------------------------------------


def test_health_while_the_model_loads(tmp_path: Path, llama_server_bin: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    port = free_port()
    proc = start_server(llama_server_bin, fifo, port, [], tmp_path / "server.log")
    try:
        with LlamaServerClient(f"http://127.0.0.1:{port}") as client:
            deadline = time.monotonic() + START_TIMEOUT_S
            health = client.health()
            while (
                health.state is HealthState.DOWN
                and time.monotonic() < deadline
                and proc.poll() is None
            ):
                time.sleep(0.2)
                health = client.health()
            assert health.state is HealthState.LOADING, (
                health,
                (tmp_path / "server.log").read_text(),
            )
            assert health.http_status == 503 and "Loading model" in health.detail
            with pytest.raises(EngineUnavailableError, match="HTTP 503"):
                client.slots()
            status = client.snapshot()
            assert status.health.state is HealthState.LOADING and status.slots is None
            assert status_line(status) == "loading · Loading model"
    finally:
        proc.kill()  # blocked opening the FIFO: only SIGKILL ends it
        proc.wait()


def test_nothing_listening_is_down() -> None:
    port = free_port()
    with LlamaServerClient(f"http://127.0.0.1:{port}", timeout_s=5) as client:
        health = client.health()
        assert health.state is HealthState.DOWN and health.http_status is None
        assert f"127.0.0.1:{port}" in health.detail
        with pytest.raises(EngineUnavailableError, match="unreachable") as raised:
            client.metrics()
        assert raised.value.hint and raised.value.exit_code == 6
        status = client.snapshot()
    assert status.health.state is HealthState.DOWN and status.metrics is None
    assert status_line(status).startswith("down · http://127.0.0.1:")


def test_a_socket_that_never_answers_is_unresponsive() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the handshake; nobody ever reads or answers
        port = listener.getsockname()[1]
        with LlamaServerClient(f"http://127.0.0.1:{port}", timeout_s=0.5) as client:
            health = client.health()
            with pytest.raises(EngineUnavailableError, match="did not answer /slots in time"):
                client.slots()
    assert health.state is HealthState.UNRESPONSIVE and health.http_status is None


class _NotLlama(http.server.BaseHTTPRequestHandler):
    """Some other web server on the port: HTML where llama-server would answer JSON/metrics."""

    def do_GET(self) -> None:
        status, kind, body = {
            "/metrics": (200, "text/html", b"<html><body>hello</body></html>"),
            "/slots": (200, "application/json", b'{"not": "a list"}'),
        }.get(self.path, (404, "text/html", b"<html>Not Found</html>"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_another_web_server_is_an_error_not_a_crash() -> None:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotLlama)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with LlamaServerClient(f"http://127.0.0.1:{httpd.server_address[1]}") as client:
            health = client.health()
            assert health.state is HealthState.ERROR and health.http_status == 404
            with pytest.raises(EngineUnavailableError, match="not a Prometheus sample"):
                client.metrics()
            with pytest.raises(EngineUnavailableError, match="expected a list"):
                client.slots()
            with pytest.raises(EngineUnavailableError, match="HTTP 404"):
                client.props()
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def test_metrics_switched_off(llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path) -> None:
    for url in serve(llama_server_bin, smollm2_gguf, tmp_path, SERVER_ARGS):
        with LlamaServerClient(url) as client:
            with pytest.raises(EngineUnavailableError, match="HTTP 501") as raised:
                client.metrics()
            assert "--metrics" in (raised.value.hint or "")
            status = client.snapshot()
        assert status.health.ready and status.metrics is None and len(status.slots) == 2
        assert status.prompt_tps is None and status.processing == 0 and status.deferred is None
        line = status_line(status)
        assert "prompt – t/s" in line and "? deferred" in line and "! llama-server at" in line
