"""An engine that fails under the gate.

Dies in the middle of a streamed answer (killed, crashed): the client's
stream ends with an error event in its route's shape — an OpenAI ``error`` line, Anthropic's
``event: error``, the Responses API's ``response.failed`` — saying the answer was cut and to
retry, never a bare truncated body; the gate logs no traceback and frees the charge.
Stops (SIGSTOP): the gate's ``/health`` says so within its own short timeout.

A real llama-server of each test's own (SmolLM2), signalled, behind a real gate; real
HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import pytest

from tests.engine.live_server import start_server, stop_server, wait_ready
from tests.factory.server_log import free_port
from tests.gate.conftest import SPLIT_ARGS, SPLIT_FACTS, client, wait_for

pytestmark = pytest.mark.engine
LONG = "Count from 1 to 1000, one number per line."
"""Greedy, SmolLM2 counts for ~120 tokens before it ends its turn (the Anthropic route
drops ``ignore_eos``): the engine is killed long before that."""
ASKED = {"temperature": 0, "ignore_eos": True, "stream": True}
BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": LONG}], "max_tokens": 1500},
    "/v1/messages": {"messages": [{"role": "user", "content": LONG}], "max_tokens": 1500},
    "/v1/responses": {"input": LONG, "max_output_tokens": 1500},
}


def _last_event(text: str) -> tuple[str | None, dict]:
    """The stream's last event: its ``event:`` name (None: none) and its data."""
    last = [block for block in text.strip().split("\n\n") if "data:" in block][-1]
    name = None
    data = {}
    for line in last.splitlines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data = json.loads(line.removeprefix("data:"))
    return name, data


@pytest.mark.parametrize("path", list(BODIES))
def test_a_stream_the_engine_stops_mid_answer_ends_with_an_error_event(
    gate,
    llama_server_bin: Path,
    smollm2_gguf: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    path: str,
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    log = tmp_path / "llama-server.log"
    proc = start_server(llama_server_bin, smollm2_gguf, port, SPLIT_ARGS, log)
    try:
        engine = f"http://127.0.0.1:{port}"
        wait_ready(engine, proc, log)
        g = gate(engine, facts=SPLIT_FACTS, engine_wait_s=1.0)
        body = {**BODIES[path], **ASKED}
        with client(g.url) as c:
            request = c.build_request("POST", path, json=body)
            response = c.send(request, stream=True)
            assert response.status_code == 200
            read = ""
            chunks = response.iter_text()
            while read.count("\n\n") < 8:  # it is streaming: the engine is mid-answer
                read += next(chunks)
            proc.kill()
            for text in chunks:  # the gate ends the stream: this loop ends
                read += text
        name, data = _last_event(read)
        if path == "/v1/responses":
            assert name == "response.failed" and data["type"] == "response.failed"
            error = data["response"]["error"]
            assert error["code"] == "engine_gone"
        elif path == "/v1/messages":  # Anthropic's error event: a type, no code
            assert name == "error" and data["type"] == "error"
            error = data["error"]
            assert error["type"] == "api_error"
        else:
            assert name is None
            error = data["error"]
            assert error["code"] == "engine_gone" and error["type"] == "server_error"
        assert "stopped in the middle of this answer" in error["message"]
        assert "Retry" in error["message"]
        wait_for(lambda: g.state().charged_tokens == 0, what="the charge freed")
        assert g.state().upstream_errors >= 1
        logged = "\n".join(r.getMessage() + str(r.exc_info or "") for r in caplog.records)
        assert "Traceback" not in logged and not any(r.exc_info for r in caplog.records), logged
    finally:
        stop_server(proc)


def test_health_says_a_stopped_engine_is_down_within_its_own_timeout(
    gate, llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    """A SIGSTOPped engine accepts connections and never answers: the gate's ``/health``
    said 503 only after its 10 s status timeout; now within its own 2 s, saying the gate is
    up and the engine is not. (The client's 6 s bound fails the old behaviour.)"""
    port = free_port()
    log = tmp_path / "llama-server.log"
    proc = start_server(llama_server_bin, smollm2_gguf, port, SPLIT_ARGS, log)
    try:
        engine = f"http://127.0.0.1:{port}"
        wait_ready(engine, proc, log)
        g = gate(engine, facts=SPLIT_FACTS)
        with client(g.url, timeout=6.0) as c:
            assert c.get("/health").status_code == 200
            proc.send_signal(signal.SIGSTOP)
            try:
                down = c.get("/health")
            finally:
                proc.send_signal(signal.SIGCONT)
            assert down.status_code == 503 and down.headers["Retry-After"] == "2"
            error = down.json()["error"]
            assert error["code"] == "engine_down"
            assert "The gate is up; the engine at" in error["message"]
            assert "did not answer within 2 s" in error["message"]
            wait_for(lambda: c.get("/health").status_code == 200, what="the engine back")
    finally:
        stop_server(proc)
