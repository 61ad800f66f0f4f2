"""The gate's other completion routes against the real llama-server (SmolLM2, two split
slots of 2,048 tokens): OpenAI's Responses API (``/v1/responses``, what Codex speaks) and a
``/v1/completions`` with a list of prompts (one engine task, and one charge, per prompt)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from homelab.agents import codex
from homelab.agents.target import target_for
from tests.gate.conftest import SPLIT_FACTS, busy_slots, client, hold, wait_for, words

pytestmark = pytest.mark.engine

ASK = "Count from one to twenty, one number per line."


def text_deltas(response: httpx.Response) -> list[str]:
    return [
        json.loads(line[6:])["delta"]
        for line in response.text.splitlines()
        if line.startswith("data: ") and '"response.output_text.delta"' in line
    ]


def completed(response: httpx.Response) -> dict:
    lines = [
        line[6:] for line in response.text.splitlines() if '"type":"response.completed"' in line
    ]
    assert len(lines) == 1, response.text[-500:]
    return json.loads(lines[0])["response"]


def test_a_responses_stream_passes_through_with_the_gates_cap_written(engine, gate) -> None:
    g = gate(engine, max_tokens_cap=6)
    body = {"model": "m", "input": ASK, "temperature": 0, "seed": 7, "stream": True}
    with client(engine) as direct, client(g.url) as through:
        uncapped = direct.post("/v1/responses", json={**body, "max_output_tokens": 40})
        response = through.post("/v1/responses", json={**body, "max_output_tokens": 4096})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert completed(uncapped)["usage"]["output_tokens"] > 6  # the model would go on
    assert completed(response)["usage"]["output_tokens"] == 6  # the gate's cap, not 4096
    assert text_deltas(response) == text_deltas(uncapped)[:6]  # same seed, same tokens
    state = g.state()
    assert (state.admitted, state.running, state.charged_tokens) == (1, 0, 0)


def test_responses_usage_is_read_in_its_own_shape(engine, gate) -> None:
    """``input_tokens`` counts the cached tokens (``input_tokens_details``), unlike
    Anthropic's: the second identical request is nearly all cache, and the gate says so."""
    g = gate(engine)
    body = {"model": "m", "instructions": "Be terse.", "input": words(300), "max_output_tokens": 2}
    with client(g.url) as c:
        answers = [c.post("/v1/responses", json=body) for _ in range(2)]
    assert [a.status_code for a in answers] == [200, 200]
    second = answers[1].json()["usage"]
    cached = second["input_tokens_details"]["cached_tokens"]
    assert cached > 250
    state = g.state()
    assert state.cache_hit_rate is not None
    total = answers[0].json()["usage"]["input_tokens"] + second["input_tokens"]
    assert state.cache_hit_rate == pytest.approx(cached / total, abs=0.01)
    assert state.admitted == 2 and state.charged_tokens == 0


def test_a_responses_request_waits_in_the_queue_like_any_other(engine, gate) -> None:
    g = gate(engine, max_concurrent=1)
    held = hold(g.url)
    answers: list[httpx.Response] = []

    def ask() -> None:
        with client(g.url) as c:
            answers.append(c.post("/v1/responses", json={"input": ASK, "max_output_tokens": 2}))

    waiter = threading.Thread(target=ask)
    try:
        waiter.start()
        wait_for(lambda: g.state().queued == 1, what="the Responses request queued")
        assert answers == []
    finally:
        held.close()
    waiter.join(180)
    assert [a.status_code for a in answers] == [200]
    assert answers[0].json()["usage"]["output_tokens"] <= 2
    state = wait_for(lambda: (s := g.state()).running == 0 and s, what="both released")
    assert state.admitted == 2 and state.charged_tokens == 0


def test_a_responses_request_too_large_is_refused_at_once_openai_shaped(engine, gate) -> None:
    g = gate(engine, token_budget=64)
    with client(g.url) as c:
        response = c.post("/v1/responses", json={"input": words(200), "max_output_tokens": 2})
        bad = c.post("/v1/responses", json={"model": "m"})
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "too_large" and "64 tokens" in error["message"]
    assert bad.status_code == 400 and "'input'" in bad.json()["error"]["message"]


def test_codex_pointed_at_the_gate_reaches_its_responses_route(engine, gate) -> None:
    g = gate(engine)
    with client(g.url) as c:
        model = c.get("/v1/models").json()["data"][0]["id"]
    target = target_for(
        SPLIT_FACTS, base_url=g.url, model=model, gated=True, gate_budget_tokens=2048
    )
    values = codex.overrides(target)
    assert json.loads(values["model_providers.homelab.wire_api"]) == "responses"
    base = json.loads(values["model_providers.homelab.base_url"])
    body = {"model": json.loads(values["model"]), "input": "Say hi.", "max_output_tokens": 3}
    with httpx.Client(trust_env=False, timeout=180.0) as c:
        response = c.post(f"{base}/responses", json=body)  # where Codex sends its turns
    assert response.status_code == 200 and response.json()["object"] == "response"
    assert g.state().admitted == 1


def tokens(engine: str, text: str) -> int:
    answer = httpx.post(
        f"{engine}/tokenize", json={"content": text, "add_special": True}, trust_env=False
    )
    return len(answer.json()["tokens"])


def test_a_list_of_prompts_is_charged_per_prompt_and_takes_a_slot_each(engine, gate) -> None:
    g = gate(engine)
    prompts = ["Once upon a time", words(40)]
    body = {"prompt": prompts, "max_tokens": 900, "ignore_eos": True, "stream": True}
    c = client(g.url)
    stream = c.send(c.build_request("POST", "/v1/completions", json=body), stream=True)
    try:
        assert stream.status_code == 200
        next(stream.iter_raw())
        state = g.state()
        assert state.running == 2  # two engine tasks, two places
        assert state.charged_tokens == sum(tokens(engine, p) for p in prompts) + 2 * 900
        wait_for(lambda: len(busy_slots(engine)) == 2, what="both slots busy")
        with client(g.url, timeout=1.5) as other, pytest.raises(httpx.ReadTimeout):
            other.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2})  # waits
    finally:
        stream.close()
        c.close()
    wait_for(lambda: (s := g.state()).running == 0 and s.charged_tokens == 0, timeout_s=60)
    with client(g.url) as c2:
        answer = c2.post("/v1/completions", json={"prompt": prompts, "max_tokens": 3})
    assert answer.status_code == 200 and len(answer.json()["choices"]) == 2


def test_a_list_of_prompts_that_fit_alone_but_not_together_is_refused(engine, gate) -> None:
    g = gate(engine, max_prompts=3)  # budget 4,096: three prompts of ~300 + 1,500 never fit
    prompts = [words(300, seed) for seed in range(3)]
    with client(g.url) as c:
        response = c.post("/v1/completions", json={"prompt": prompts, "max_tokens": 1500})
        one = c.post("/v1/completions", json={"prompt": prompts[:1], "max_tokens": 2})
    assert response.status_code == 413
    assert "at most 4096 tokens at once" in response.json()["error"]["message"]
    assert one.status_code == 200  # a list of one prompt is one task
    assert g.state().refused["too_large"] == 1
