"""The gate in front of an engine with its own key (issue 22): the real llama-server
(SmolLM2) started with ``LLAMA_API_KEY``, gates in front of it holding the right key, a wrong
one, or none.

With the right key every route works through the gate (admitted chats, counts, ``/props`` for
limits the plan did not give, passthrough, ``/metrics``, ``/health``). With a wrong or no key
the client hears a 502 that says the engine refused the gate's key: never the engine's 401,
which would tell the client its own key was wrong. homelab's own status client (``status``,
the live panels) reads the engine with the key, and says what a missing one means.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from homelab.engine.engine_key import new_engine_key
from homelab.engine.supervision.facts import PlanFacts
from homelab.errors import EngineError
from homelab.gate.runner import GateRunner
from homelab.gate.settings import GateSettings
from tests.engine.live_server import serve
from tests.gate.conftest import SPLIT_ARGS, SPLIT_FACTS, TIMEOUT_S

pytestmark = pytest.mark.engine

KEY = new_engine_key()


@pytest.fixture(scope="module")
def keyed_engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """SmolLM2 whose every route but ``/health`` wants :data:`KEY` (given in its environment)."""
    before = os.environ.get("LLAMA_API_KEY")
    os.environ["LLAMA_API_KEY"] = KEY  # inherited by the engine's Popen alone, then restored
    try:
        folder = tmp_path_factory.mktemp("keyed")
        started = serve(llama_server_bin, smollm2_gguf, folder, SPLIT_ARGS)
        url = next(started)
    finally:
        if before is None:
            del os.environ["LLAMA_API_KEY"]
        else:
            os.environ["LLAMA_API_KEY"] = before
    yield url
    started.close()


@pytest.fixture
def gate_with() -> Iterator:
    made: list[GateRunner] = []

    def make(engine_url: str, key: str | None, facts: PlanFacts | None = None) -> str:
        runner = GateRunner(GateSettings(port=0), engine_url, facts, key)  # None: from /props
        made.append(runner)
        return runner.start()

    yield make
    for runner in made:
        runner.stop()


def _chat(url: str, *, stream: bool = False) -> httpx.Response:
    body = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": stream,
    }
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT_S, trust_env=False)


def test_the_engine_refuses_a_caller_without_its_key(keyed_engine: str) -> None:
    assert _chat(keyed_engine).status_code == 401
    assert httpx.get(f"{keyed_engine}/health", timeout=10, trust_env=False).status_code == 200


def test_the_gate_with_the_key_serves_every_route(keyed_engine: str, gate_with) -> None:
    gate = gate_with(keyed_engine, KEY)
    answer = _chat(gate)  # limits from the engine's /props, the prompt counted, forwarded
    assert answer.status_code == 200, answer.text
    assert "data: [DONE]" in _chat(gate, stream=True).text
    for path in ("/slots", "/props", "/v1/models", "/health"):
        seen = httpx.get(f"{gate}{path}", timeout=10, trust_env=False)
        assert seen.status_code == 200, (path, seen.text)
    tokens = httpx.post(f"{gate}/tokenize", json={"content": "hi"}, timeout=10, trust_env=False)
    assert tokens.status_code == 200 and tokens.json()["tokens"]
    metrics = httpx.get(f"{gate}/metrics", timeout=10, trust_env=False).text
    assert "homelab_gate_" in metrics and "llamacpp:" in metrics  # the engine's too


@pytest.mark.parametrize("facts", [None, SPLIT_FACTS], ids=["limits from /props", "planned"])
@pytest.mark.parametrize("key", ["wrong-" + "k" * 30, None], ids=["wrong key", "no key"])
def test_a_gate_without_the_right_key_says_so_with_a_502(
    keyed_engine: str, gate_with, key: str | None, facts: PlanFacts | None
) -> None:
    gate = gate_with(keyed_engine, key, facts)
    for response in (
        _chat(gate),
        _chat(gate, stream=True),
        httpx.get(f"{gate}/slots", timeout=10, trust_env=False),
    ):
        assert response.status_code == 502, response.text
        error = response.json()["error"]
        assert error["code"] == "engine_key_refused"
        assert "refused the gate's key" in error["message"]


def test_the_status_client_reads_a_keyed_engine_with_its_key(keyed_engine: str) -> None:
    from homelab.engine.llamacpp.client import HealthState, LlamaServerClient

    with LlamaServerClient(keyed_engine, api_key=KEY) as client:
        seen = client.snapshot()
    assert seen.health.state is HealthState.READY and seen.slots and not seen.notes
    with LlamaServerClient(keyed_engine) as client:  # without: ready (/health is open), no slots
        unkeyed = client.snapshot()
        with pytest.raises(EngineError) as refused:
            client.slots()
    assert unkeyed.slots is None and "HTTP 401" in unkeyed.notes[0]
    assert refused.value.hint is not None and "engine.json" in refused.value.hint
