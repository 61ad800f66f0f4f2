"""The unified-pool case of issue 9: SmolLM2 on one 4,096-token pool shared by 4 slots
(``-kvu``). Three concurrent chats of ~1,300 prompt tokens and 120 generated ones each fit
the pool by their prompts (3,900 cells) but not with what they generate: sent directly,
llama-server b11312 admits all three and each fails with HTTP 500 "Context size has been
exceeded" once the pool is full (issue 9 measured the same with ~1,450-token prompts on an
older build; b11312 defers a third prompt that does not fit, so the overflow must come from
generation). Through the gate, whose budget is 85 % of the pool and which charges each its
prompt and completion cap, two run, the third waits, and all are answered."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import pytest

from homelab.engine.supervision.facts import PlanFacts
from tests.engine.live_server import serve
from tests.gate.conftest import TIMEOUT_S, words

pytestmark = pytest.mark.engine

UNIFIED_ARGS = ["-c", "4096", "-np", "4", "-kvu", "-ngl", "0", "-t", "1", "--metrics"]
UNIFIED_FACTS = PlanFacts(
    slots=4,
    ctx_total=4096,
    ctx_per_slot=4096,
    kv_tokens=4096,
    unified=True,
    cache_type_k="f16",
    cache_type_v="f16",
)
PROMPT_TOKENS = 1300
GENERATED = 120
"""3 × 1,300 prompt cells fit the 4,096-cell pool; 3 × (1,300 + 120) do not."""


@pytest.fixture(scope="module")
def pool(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from serve(llama_server_bin, smollm2_gguf, tmp_path_factory.mktemp("pool"), UNIFIED_ARGS)


def chats(url: str) -> list[dict]:
    """Three different chats of about PROMPT_TOKENS prompt tokens each (measured)."""
    out = []
    for seed in range(3):
        n = PROMPT_TOKENS
        for _ in range(3):
            body = {
                "messages": [{"role": "user", "content": f"Story {seed}: " + words(n, seed)}],
                "max_tokens": GENERATED,
                "ignore_eos": True,
                "temperature": 0,
            }
            counted = httpx.post(
                f"{url}/v1/chat/completions/input_tokens",
                json=body,
                timeout=TIMEOUT_S,
                trust_env=False,
            ).json()["input_tokens"]
            if abs(counted - PROMPT_TOKENS) <= 10:
                break
            n = max(1, n + (PROMPT_TOKENS - counted))
        assert abs(counted - PROMPT_TOKENS) <= 25, counted
        out.append(body)
    return out


async def send_all(url: str, bodies: list[dict]) -> list[tuple[int, str]]:
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S * 2)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:

        async def one(body: dict) -> tuple[int, str]:
            async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
                return resp.status, await resp.text()

        return await asyncio.gather(*(one(b) for b in bodies))


def test_three_chats_that_overflow_the_pool_fail_direct_and_are_queued_and_answered_gated(
    pool, gate
) -> None:
    bodies = chats(pool)
    direct = asyncio.run(send_all(pool, bodies))
    assert [status for status, _ in direct] == [500, 500, 500], [t[:200] for _, t in direct]
    assert all("Context size has been exceeded" in text for _, text in direct)
    g = gate(pool, facts=UNIFIED_FACTS)
    assert g.state().budget_tokens == 3481
    most_charged = most_running = most_queued = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal most_charged, most_running, most_queued
        while not done.is_set():
            state = g.state()
            most_charged = max(most_charged, state.charged_tokens)
            most_running = max(most_running, state.running)
            most_queued = max(most_queued, state.queued)
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        through = asyncio.run(send_all(g.url, bodies))
    finally:
        done.set()
        sampler.join(10)
    assert [status for status, _ in through] == [200, 200, 200], [t[:200] for _, t in through]
    for _, text in through:
        assert json.loads(text)["usage"]["completion_tokens"] == GENERATED
    # 3 × (1,300 + 120) > 3,481: two ran at once, the third waited for room
    assert (most_running, most_queued) == (2, 1)
    assert most_charged <= 3481
    state = g.state()
    assert state.admitted == 3 and state.charged_tokens == 0


def test_an_oversized_request_on_the_pool_is_refused_at_once(pool, gate) -> None:
    g = gate(pool, facts=UNIFIED_FACTS)
    body = {"messages": [{"role": "user", "content": words(3600)}], "max_tokens": 8}
    response = httpx.post(
        f"{g.url}/v1/chat/completions", json=body, timeout=TIMEOUT_S, trust_env=False
    )
    assert response.status_code == 413
    assert "at most 3481 tokens per request" in response.json()["error"]["message"]
