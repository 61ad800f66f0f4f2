"""The gate in front of the real llama-server (SmolLM2, two split slots of 2,048 tokens).

Each test starts its own gate (loopback, a free port) in front of the module's engine and
sends a bounded number of small requests; every wait is bounded."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from homelab.gate.errors import GatePortInUseError
from homelab.gate.runner import GateRunner
from homelab.gate.settings import GateSettings
from tests.gate.conftest import (
    SPLIT_FACTS,
    busy_slots,
    client,
    engine_counters,
    hold,
    wait_for,
    words,
)

pytestmark = pytest.mark.engine

CHAT = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Name three colours."},
]


def deltas(response: httpx.Response) -> list[str]:
    out = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:]).get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    out.append(content)
    return out


def test_streamed_deltas_equal_a_direct_request_with_the_same_seed(engine, gate) -> None:
    g = gate(engine)
    body = {"messages": CHAT, "max_tokens": 24, "temperature": 0, "seed": 42, "stream": True}
    with client(engine) as direct, client(g.url) as through:
        expected = deltas(direct.post("/v1/chat/completions", json=body))
        response = through.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "content-encoding" not in response.headers
    assert len(expected) > 3
    assert deltas(response) == expected
    assert response.text.rstrip().endswith("data: [DONE]")


def test_bad_json_is_answered_400_and_the_engine_never_sees_it(engine, gate) -> None:
    g = gate(engine)
    before = engine_counters(engine)
    with client(g.url) as c:
        for raw in (b"{bad", b'{"messages": "not a list"}', b"[]"):
            response = c.post("/v1/chat/completions", content=raw)
            assert response.status_code == 400
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["message"]
        anthropic = c.post("/v1/messages", content=b"{bad")
        assert anthropic.status_code == 400 and anthropic.json()["type"] == "error"
    assert engine_counters(engine) == before
    assert g.state().admitted == 0


def test_a_request_larger_than_the_ceiling_is_refused_at_once_with_its_size(engine, gate) -> None:
    g = gate(engine)
    before = engine_counters(engine)
    body = {"messages": [{"role": "user", "content": words(2600)}], "max_tokens": 8}
    with client(g.url) as c:
        response = c.post("/v1/chat/completions", json=body)
    assert response.status_code == 413
    message = response.json()["error"]["message"]
    assert "2048 tokens per request" in message
    prompt = int(message.split("prompt is ")[1].split(" ")[0])
    assert prompt > 2048
    assert engine_counters(engine)["prompt"] == before["prompt"]
    state = g.state()
    assert state.refused["too_large"] == 1 and state.admitted == 0


def test_the_api_key_is_checked_on_every_route(engine, gate) -> None:
    g = gate(engine, api_key="s3cret")
    with client(g.url) as c:
        for method, path in (
            ("GET", "/health"),
            ("GET", "/v1/models"),
            ("GET", "/metrics"),
            ("GET", "/slots"),
            ("POST", "/v1/chat/completions"),
        ):
            response = c.request(method, path, json={"messages": CHAT, "max_tokens": 2})
            assert response.status_code == 401, path
            wrong = c.request(method, path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, path
        ok = c.post(
            "/v1/chat/completions",
            json={"messages": CHAT, "max_tokens": 2},
            headers={"Authorization": "Bearer s3cret"},
        )
        assert ok.status_code == 200
        anthropic = c.post(
            "/v1/messages",
            json={"model": "m", "messages": CHAT[1:], "max_tokens": 2},
            headers={"x-api-key": "s3cret"},
        )
        assert anthropic.status_code == 200 and anthropic.json()["type"] == "message"
        assert c.get("/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_queue_timeout_answers_503_with_retry_after_and_streams_get_keepalives(
    engine, gate
) -> None:
    g = gate(engine, max_concurrent=1, queue_timeout_s=1.0, keepalive_s=0.2)
    held = hold(g.url)
    try:
        with client(g.url) as c:
            started = time.monotonic()
            response = c.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4})
            waited = time.monotonic() - started
            assert response.status_code == 503
            assert int(response.headers["Retry-After"]) >= 1
            assert response.json()["error"]["code"] == "timeout"
            assert waited >= 1.0
            streamed = c.post(
                "/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4, "stream": True}
            )
        assert streamed.status_code == 200
        assert streamed.text.startswith(": queued\n\n")
        assert streamed.text.count(": queued") >= 3
        last = [line for line in streamed.text.splitlines() if line.startswith("data: ")][-1]
        assert json.loads(last[6:])["error"]["code"] == "timeout"
    finally:
        held.close()
    assert g.state().refused["timeout"] == 2


def test_a_client_gone_while_queued_frees_its_place(engine, gate) -> None:
    g = gate(engine, max_concurrent=1)
    held = hold(g.url)
    try:
        with client(g.url, timeout=1.0) as c, pytest.raises(httpx.ReadTimeout):
            c.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 4})
        wait_for(
            lambda: g.state().refused["client_gone"] == 1, what="the queued client counted gone"
        )
        assert g.state().queued == 0 and g.state().running == 1
    finally:
        held.close()


def test_a_client_gone_while_streaming_cancels_the_task_and_frees_its_slot(engine, gate) -> None:
    g = gate(engine, max_concurrent=1)
    before = engine_counters(engine)
    held = hold(g.url)
    assert g.state().charged_tokens > 1500
    wait_for(lambda: busy_slots(engine), what="the engine's slot busy")
    held.close()
    state = wait_for(
        lambda: (s := g.state()).charged_tokens == 0 and s.running == 0 and s,
        what="the charge freed",
    )
    assert busy_slots(engine) == []
    predicted = engine_counters(engine)["predicted"] - before["predicted"]
    assert predicted < 1500  # llama-server cancelled the task, it did not run to its cap
    assert state.admitted == 1
    with client(g.url) as c:  # and the next request is served
        assert (
            c.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 2}).status_code
            == 200
        )


def test_a_client_gone_while_waiting_for_a_whole_answer_cancels_the_task(engine, gate) -> None:
    g = gate(engine, max_concurrent=1)
    before = engine_counters(engine)
    body = {
        "messages": [{"role": "user", "content": "Count slowly to one thousand."}],
        "max_tokens": 1500,
        "ignore_eos": True,
    }
    with client(g.url, timeout=3.0) as c, pytest.raises(httpx.ReadTimeout):
        c.post("/v1/chat/completions", json=body)
    wait_for(
        lambda: (s := g.state()).charged_tokens == 0 and s.running == 0,
        timeout_s=60,
        what="the charge freed",
    )
    assert busy_slots(engine) == []
    assert engine_counters(engine)["predicted"] - before["predicted"] < 1500


def test_health_metrics_and_passthrough_routes(engine, gate) -> None:
    g = gate(engine)
    with client(g.url) as c:
        assert c.get("/health").json() == {"status": "ok"}
        assert (
            c.post("/v1/chat/completions", json={"messages": CHAT, "max_tokens": 2}).status_code
            == 200
        )
        assert c.post("/tokenize", json={"content": "hello world"}).json()["tokens"]
        assert len(c.get("/slots").json()) == 2
        assert c.get("/props").json()["total_slots"] == 2
        assert c.get("/v1/models").json()["data"]
        text = c.get("/metrics").text
    assert "homelab_gate_admitted_total 1.0" in text
    assert 'homelab_gate_refused_total{reason="queue_full"} 0.0' in text
    assert "homelab_gate_token_budget 4096.0" in text
    assert "llamacpp:prompt_tokens_total" in text


def test_health_through_a_gate_whose_engine_is_down(gate) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    g = gate(f"http://127.0.0.1:{port}", facts=None)
    with client(g.url) as c:
        assert c.get("/health").status_code == 503
        response = c.post("/v1/chat/completions", json={"messages": CHAT})
        assert response.status_code == 503 and "Retry-After" in response.headers


def test_a_taken_port_is_a_clear_error_and_stop_is_idempotent(engine, gate) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        runner = GateRunner(GateSettings(port=port), engine, SPLIT_FACTS)
        with pytest.raises(GatePortInUseError) as raised:
            runner.start()
    assert str(port) in raised.value.message and "port setting" in (raised.value.hint or "")
    assert raised.value.exit_code == 6
    runner.stop()
    runner.stop()
    ok = gate(engine)
    assert ok.url and ok.state().budget_tokens == 4096
    ok.stop()
    ok.stop()


def last_slot(engine_url: str) -> int:
    """The slot that ran the engine's latest task."""
    slots = httpx.get(f"{engine_url}/slots", trust_env=False, timeout=60).json()
    return max(slots, key=lambda s: s.get("id_task") or -1)["id"]


def test_affinity_keeps_conversations_on_their_slots_and_a_reprefill_raises_an_alarm(
    engine, gate
) -> None:
    g = gate(engine)
    conversations = {
        name: [
            {"role": "system", "content": f"Agent {name}. " + words(300, seed)},
            {"role": "user", "content": "First question?"},
        ]
        for seed, name in enumerate("AB")
    }
    slot_of = {}
    reuse = []
    with client(g.url) as c:
        for turn in range(2):
            for name, messages in conversations.items():
                body = {"messages": messages, "max_tokens": 4, "temperature": 0}
                answer = c.post("/v1/chat/completions", json=body).json()
                timings = answer["timings"]
                if turn == 0:
                    slot_of[name] = last_slot(engine)
                else:
                    assert last_slot(engine) == slot_of[name]
                    reuse.append(timings["cache_n"] / (timings["cache_n"] + timings["prompt_n"]))
                messages += [
                    {"role": "assistant", "content": answer["choices"][0]["message"]["content"]},
                    {"role": "user", "content": f"Question {turn + 2}?"},
                ]
        assert slot_of["A"] != slot_of["B"]
        assert min(reuse) > 0.9
        state = g.state()
        assert state.alarms == () and state.cache_hit_rate is not None
        # another client pins A's slot itself and overwrites its cache: A's next turn
        # re-processes its prompt, and the gate says so
        intruder = [{"role": "user", "content": "Intruder. " + words(400, 5)}]
        c.post(
            "/v1/chat/completions",
            json={"messages": intruder, "max_tokens": 2, "id_slot": slot_of["A"]},
        )
        c.post(
            "/v1/chat/completions",
            json={"messages": conversations["A"], "max_tokens": 2, "temperature": 0},
        )
    alarms = g.state().alarms
    assert len(alarms) == 1
    assert alarms[0].slot == slot_of["A"] and alarms[0].prompt_tokens > 300
    assert alarms[0].cached_tokens < alarms[0].prompt_tokens / 2


def test_anthropic_messages_stream_through_the_gate_with_its_cap_written(engine, gate) -> None:
    g = gate(engine, max_tokens_cap=5)
    body = {"model": "m", "messages": CHAT[1:], "max_tokens": 4096, "stream": True}
    with client(g.url) as c:
        response = c.post("/v1/messages", json=body)
    assert response.status_code == 200
    events = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    delta = [
        json.loads(line[6:])
        for line in response.text.splitlines()
        if line.startswith("data: ") and '"message_delta"' in line
    ][0]
    assert delta["usage"]["output_tokens"] <= 5  # the gate's cap, not the 4096 asked
    state = g.state()
    assert state.admitted == 1 and state.charged_tokens == 0
