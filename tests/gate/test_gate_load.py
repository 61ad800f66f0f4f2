"""200 concurrent clients through the gate against two engine slots (the gate's default
max_concurrent, the engine's ``-np 2``): every client is answered or refused with 429/503
and Retry-After (a queued stream's keep-alive interval is longer than the queue timeout,
so it is refused before its 200 is sent), none is lost or hangs, and the engine's
``/slots`` never shows more busy slots than the two allowed — and shows both in use."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import aiohttp
import pytest

from tests.gate.conftest import busy_slots

pytestmark = pytest.mark.engine

CLIENTS = 200
CLIENT_TIMEOUT_S = 240.0
"""Bound on one client (a hung client fails the test), not an expectation."""


async def one(session: aiohttp.ClientSession, url: str, i: int) -> tuple[str, int, str]:
    body = {
        "messages": [{"role": "user", "content": f"Say the number {i}."}],
        "max_tokens": 3,
        "temperature": 0,
        "stream": i % 4 == 0,
    }
    async with session.post(f"{url}/v1/chat/completions", json=body) as resp:
        text = await resp.text()
        if resp.status in (429, 503):
            assert int(resp.headers["Retry-After"]) >= 1
            assert json.loads(text)["error"]["code"] in ("queue_full", "timeout")
            return "refused", resp.status, text
        assert resp.status == 200, text[:300]
        if body["stream"]:
            assert text.rstrip().endswith("data: [DONE]"), text[-300:]
        else:
            assert json.loads(text)["choices"][0]["message"]["content"] is not None
        return "answered", 200, text


async def crowd(url: str) -> list[tuple[str, int, str]]:
    timeout = aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout, trust_env=False
    ) as session:
        return await asyncio.gather(*(one(session, url, i) for i in range(CLIENTS)))


def test_200_clients_against_two_slots_are_each_answered_or_refused(engine, gate) -> None:
    g = gate(engine, max_queue=64, queue_timeout_s=15.0, keepalive_s=30.0)
    assert g.state().max_concurrent == 2  # the engine's two slots
    most_busy = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal most_busy
        while not done.is_set():
            most_busy = max(most_busy, len(busy_slots(engine)))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    try:
        results = asyncio.run(crowd(g.url))
    finally:
        done.set()
        sampler.join(30)
    took = time.monotonic() - started
    answered = [r for r in results if r[0] == "answered"]
    statuses = [r[1] for r in results if r[0] == "refused"]
    state = g.state()
    print(
        f"200 clients in {took:.1f} s: {len(answered)} answered, "
        f"{statuses.count(429)} × 429, {statuses.count(503)} × 503; "
        f"most busy slots seen {most_busy}"
    )
    assert len(results) == CLIENTS
    assert answered and statuses.count(429) > 0  # both happen with this crowd
    assert most_busy == 2  # both slots served, never more
    assert sorted(set(statuses)) in ([429], [429, 503])
    assert state.admitted == len(answered)
    assert state.refused["queue_full"] == statuses.count(429)
    assert state.refused["timeout"] == statuses.count(503)
    assert (state.running, state.queued, state.charged_tokens) == (0, 0, 0)
