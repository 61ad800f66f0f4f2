"""A live gate takes new limits when its engine restarts on another plan (GateRunner.retarget):
queued requests keep their place, admitted ones their charge, a queued request now larger
than a request may be is refused with the too-large 413. Real llama-server (SmolLM2, two
split slots of 2,048 tokens) behind a real gate."""

from __future__ import annotations

import threading
from dataclasses import replace

import httpx
import pytest

from tests.gate.conftest import SPLIT_FACTS, client, hold, wait_for, words

pytestmark = pytest.mark.engine

SMALLER = replace(SPLIT_FACTS, ctx_total=2048, ctx_per_slot=1024, kv_tokens=2048)
"""The engine re-planned: two slots of 1,024 tokens (ceiling 1,024, budget 2,048)."""


def test_new_limits_keep_the_queue_refuse_what_never_fits_and_keep_running_charges(
    engine, gate
) -> None:
    g = gate(engine)
    held = [hold(g.url), hold(g.url)]  # both places taken, ~1,500 tokens charged each
    answers: dict[str, httpx.Response] = {}

    def ask(name: str, body: dict) -> None:
        with client(g.url) as c:
            answers[name] = c.post("/v1/chat/completions", json=body)

    big = {"messages": [{"role": "user", "content": words(600)}], "max_tokens": 900}
    small = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 3}
    waiters = [threading.Thread(target=ask, args=("big", big))]
    waiters.append(threading.Thread(target=ask, args=("small", small)))
    try:
        charged = g.state().charged_tokens
        assert charged > 3000
        waiters[0].start()
        wait_for(lambda: g.state().queued == 1, what="the big one queued")
        waiters[1].start()
        wait_for(lambda: g.state().queued == 2, what="the small one queued behind it")

        limits = g.retarget(SMALLER)
        assert limits is not None
        assert (limits.budget_tokens, limits.ceiling_tokens, limits.max_concurrent) == (
            2048,
            1024,
            2,
        )
        waiters[0].join(30)
        assert answers["big"].status_code == 413  # ~1,500 tokens: it could never run now
        assert answers["big"].json()["error"]["code"] == "too_large"
        state = g.state()
        assert (state.budget_tokens, state.ceiling_tokens) == (2048, 1024)
        assert state.charged_tokens == charged and state.running == 2  # admitted keep theirs
        assert state.queued == 1 and "small" not in answers  # kept, waiting for room
        assert state.refused["too_large"] == 1
    finally:
        for h in held:
            h.close()
    waiters[1].join(180)
    assert answers["small"].status_code == 200  # admitted once the held ones left
    state = wait_for(lambda: (s := g.state()).running == 0 and s, timeout_s=60, what="all done")
    assert state.admitted == 3 and state.charged_tokens == 0


def test_one_slot_now_means_one_request_at_a_time(engine, gate) -> None:
    g = gate(engine)
    assert g.state().max_concurrent == 2
    g.retarget(replace(SPLIT_FACTS, slots=1, ctx_per_slot=4096))
    first = hold(g.url)
    try:
        with client(g.url, timeout=1.5) as c, pytest.raises(httpx.ReadTimeout):
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
            c.post("/v1/chat/completions", json=body)  # tokens to spare, no place
        state = g.state()
        assert (state.max_concurrent, state.ceiling_tokens) == (1, 4096)
        assert state.charged_tokens + 100 < state.budget_tokens
    finally:
        first.close()
