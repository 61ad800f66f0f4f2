"""An engine that is down for a moment behind the gate (a restart into a new plan, a heal, a
crash the supervisor restarts): an admitted request waits for it and is answered once it is
back, not 502; an engine that stays away past ``engine_wait_s`` is answered 502. A real gate,
a real llama-server (SmolLM2) started late on the port the gate sends to, real HTTP."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.engine.live_server import start_server, stop_server, wait_ready
from tests.factory.server_log import free_port
from tests.gate.conftest import SPLIT_ARGS, client, wait_for

pytestmark = pytest.mark.engine

CHAT = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def test_a_request_admitted_while_the_engine_is_down_is_answered_once_it_is_back(
    gate, llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    port = free_port()
    engine_url = f"http://127.0.0.1:{port}"
    runner = gate(engine_url, engine_wait_s=120.0)  # nothing listens there yet
    out: dict = {}

    def ask() -> None:
        with client(runner.url) as c:
            out["response"] = c.post("/v1/chat/completions", json=CHAT)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    wait_for(lambda: runner.state().running == 1, what="the request admitted")
    time.sleep(1.0)  # it is refused a connection meanwhile, and waits
    assert thread.is_alive() and "response" not in out
    log = tmp_path / "llama-server.log"
    proc = start_server(llama_server_bin, smollm2_gguf, port, SPLIT_ARGS, log)
    try:
        wait_ready(engine_url, proc, log)
        thread.join(180)
        response = out["response"]
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["content"]
        state = runner.state()
        assert state.upstream_errors == 0 and state.running == 0
    finally:
        stop_server(proc)


def test_an_engine_that_stays_away_is_answered_502_after_the_wait(gate) -> None:
    engine_url = f"http://127.0.0.1:{free_port()}"
    runner = gate(engine_url, engine_wait_s=1.5)
    started = time.monotonic()
    with client(runner.url) as c:
        response = c.post("/v1/chat/completions", json=CHAT)
    waited = time.monotonic() - started
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "engine_unreachable"
    assert waited >= 1.5  # it waited for the engine before giving up
    assert runner.state().running == 0  # its place is given back
