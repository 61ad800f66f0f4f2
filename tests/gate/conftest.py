"""Fixtures of the gate tests: a real llama-server with SmolLM2 on loopback (one per test
module), gates in front of it (stopped at teardown), and small HTTP helpers."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from homelab.engine.llamacpp.metrics import LlamaMetrics
from homelab.engine.supervision.facts import PlanFacts
from homelab.gate.runner import GateRunner
from homelab.gate.settings import GateSettings
from tests.engine.live_server import serve

SPLIT_ARGS = ["-c", "4096", "-np", "2", "-ngl", "0", "-t", "1", "--cache-ram", "0", "--metrics"]
"""Two split slots of 2,048 tokens; one compute thread (a 2-core machine shared by many
processes serves far faster so), no host-RAM prompt cache (a slot's cache is its own)."""
SPLIT_FACTS = PlanFacts(
    slots=2,
    ctx_total=4096,
    ctx_per_slot=2048,
    kv_tokens=4096,
    unified=False,
    cache_type_k="f16",
    cache_type_v="f16",
)
TIMEOUT_S = 180.0
"""An upper bound for one request on a loaded 2-core machine, not an expectation."""


@pytest.fixture(scope="module")
def engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """SmolLM2 on two split slots (``--metrics``); yields its URL."""
    yield from serve(llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("gate"), SPLIT_ARGS)


@pytest.fixture
def gate() -> Iterator[Callable[..., GateRunner]]:
    """``gate(engine_url, facts=SPLIT_FACTS, **settings)`` → a started GateRunner."""
    made: list[GateRunner] = []

    def make(
        engine_url: str, facts: PlanFacts | None = SPLIT_FACTS, **settings: object
    ) -> GateRunner:
        settings.setdefault("port", 0)
        runner = GateRunner(GateSettings(**settings), engine_url, facts)  # type: ignore[arg-type]
        made.append(runner)
        runner.start()
        return runner

    yield make
    for runner in made:
        runner.stop()


def client(url: str, *, timeout: float = TIMEOUT_S, **kwargs: object) -> httpx.Client:
    return httpx.Client(base_url=url, trust_env=False, timeout=timeout, **kwargs)  # type: ignore[arg-type]


def engine_counters(engine_url: str) -> dict[str, float]:
    """The engine's work counters (prompt tokens, decodes, predicted tokens)."""
    text = httpx.get(f"{engine_url}/metrics", trust_env=False, timeout=TIMEOUT_S).text
    m = LlamaMetrics.from_text(text)
    return {
        "prompt": m.prompt_tokens_total or 0.0,
        "predicted": m.tokens_predicted_total or 0.0,
        "decode": m.n_decode_total or 0.0,
    }


def busy_slots(engine_url: str) -> list[int]:
    slots = httpx.get(f"{engine_url}/slots", trust_env=False, timeout=TIMEOUT_S).json()
    return [s["id"] for s in slots if s["is_processing"]]


class Held:
    """A streaming request kept open; :meth:`close` disconnects its client."""

    def __init__(self, c: httpx.Client, response: httpx.Response) -> None:
        self.client, self.response = c, response
        self.chunks = response.iter_raw()
        next(self.chunks)  # kept: a dropped iterator closes the connection

    def close(self) -> None:
        self.response.close()
        self.client.close()


def hold(gate_url: str, **extra: object) -> Held:
    """A streaming chat that keeps generating (``ignore_eos``) until its client closes;
    returns once its first chunk arrived (it is admitted and running)."""
    c = client(gate_url)
    body = {
        "messages": [{"role": "user", "content": "Count slowly to one thousand."}],
        "max_tokens": 1500,
        "ignore_eos": True,
        "stream": True,
        **extra,
    }
    response = c.send(c.build_request("POST", "/v1/chat/completions", json=body), stream=True)
    assert response.status_code == 200
    return Held(c, response)


def words(n: int, seed: int = 0) -> str:
    """``n`` distinct-ish words (about one token each for SmolLM2)."""
    vocab = ["apple", "river", "stone", "cloud", "green", "table", "light", "north", "seven"]
    return " ".join(f"{vocab[(i * 7 + seed) % len(vocab)]}" for i in range(n))


def wait_for(check, timeout_s: float = 30.0, what: str = "condition"):
    """``check()`` once it is truthy, polled every 50 ms; the test fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"{what} not reached within {timeout_s} s")
