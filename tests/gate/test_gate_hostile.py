"""Hostile requests against the real gate (real llama-server, SmolLM2, loopback only): each
is answered a clean 4xx in the route's shape with one log line and no traceback, its charge
is back to 0, and the gate still serves a good request afterwards.

What an adversarial pass found (issue 22): JSON nested 100,000 deep, a lone surrogate in a
body the gate rewrites, and non-UTF-8 key headers were 500s with 30-line tracebacks (the
surrogate one after admission, its charge held until the slot read idle).
"""

from __future__ import annotations

import logging
import socket

import httpx
import pytest

from tests.gate.conftest import client, wait_for, words
from tests.gate.counting_relay import counting_relay
from tests.gate.test_gate_routes import tokens

pytestmark = pytest.mark.engine

CHAT = "/v1/chat/completions"
GOOD = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2}
KEY = "sekret-key-1"


def raw_request(url: str, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` (request line and headers, CRLF-separated, without the blank line) and
    ``body`` on a raw socket; returns (status, body) of the answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        length = b"Content-Length: %d\r\n" % len(body)
        s.sendall(head + b"\r\n" + length + b"Connection: close\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.partition(b"\r\n\r\n")[2]


def no_traceback(records: list[logging.LogRecord]) -> None:
    bad = [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


def access_lines(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if r.name == "homelab.gate.access"]


def still_serves(g, **headers: str) -> None:
    with client(g.url, headers=headers) as c:
        assert c.post(CHAT, json=GOOD).status_code == 200
    state = g.state()
    assert (state.charged_tokens, state.running, state.queued) == (0, 0, 0)


@pytest.mark.parametrize("path", [CHAT, "/v1/messages", "/completion"])
def test_json_nested_100k_deep_is_a_400_naming_the_limit(engine, gate, caplog, path) -> None:
    caplog.set_level(logging.INFO)
    g = gate(engine)
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b', "prompt": "x"}'
    with client(g.url) as c:
        response = c.post(path, content=deep, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    body = response.json()
    message = body["error"]["message"]
    assert "more than 128 levels deep" in message
    if path == "/v1/messages":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    no_traceback(caplog.records)
    assert len(access_lines(caplog.records)) == 1
    still_serves(g)
    assert g.state().admitted == 1  # the good one only


def test_a_body_just_under_the_depth_limit_still_parses(engine, gate) -> None:
    g = gate(engine)
    nested = "[" * 120 + "]" * 120
    raw = '{"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2, "x": %s}'
    with client(g.url) as c:
        response = c.post(CHAT, content=raw % nested, headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    assert g.state().charged_tokens == 0


@pytest.mark.parametrize(
    "extra",
    [{"max_tokens": 100_000}, {}],  # a bound over the cap: the gate rewrites the body
    ids=["rewritten", "appended"],
)
def test_a_lone_surrogate_is_refused_before_admission(engine, gate, caplog, extra) -> None:
    caplog.set_level(logging.INFO)
    g = gate(engine, max_tokens_cap=4)
    raw = b'{"messages": [{"role": "user", "content": "hi \\ud800 there"}]'
    raw += b"".join(b', "%s": %d' % (k.encode(), v) for k, v in extra.items()) + b"}"
    with client(g.url) as c:
        response = c.post(CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "lone UTF-16 surrogate" in response.json()["error"]["message"]
    state = g.state()
    assert (state.admitted, state.charged_tokens) == (0, 0)
    no_traceback(caplog.records)
    still_serves(g)


def test_a_valid_surrogate_pair_is_text(engine, gate) -> None:
    g = gate(engine, max_tokens_cap=4)
    raw = b'{"messages": [{"role": "user", "content": "hi \\ud83d\\ude00"}], "max_tokens": 99999}'
    with client(g.url) as c:
        response = c.post(CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    assert g.state().charged_tokens == 0


@pytest.mark.parametrize(
    "header", [b"x-api-key: \xff\xfe\x80key", b"Authorization: Bearer \xc3\x28\xa0\xa1"]
)
def test_non_utf8_key_headers_are_a_clean_401(engine, gate, caplog, header) -> None:
    caplog.set_level(logging.INFO)
    g = gate(engine, api_key=KEY)
    port = g.url.rsplit(":", 1)[1]
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n" % port.encode()
    head += b"Content-Type: application/json\r\n" + header
    status, body = raw_request(g.url, head, b'{"messages": [{"role": "user", "content": "x"}]}')
    assert status == 401
    assert b"invalid_api_key" in body
    no_traceback(caplog.records)
    assert len(access_lines(caplog.records)) == 1
    still_serves(g, Authorization=f"Bearer {KEY}")


# -- lists of prompts and n ---------------------------------------------------------------


def test_a_list_of_many_prompts_is_refused_before_any_engine_call(engine, gate) -> None:
    with counting_relay(engine) as (relay, seen):
        g = gate(relay)  # the plan's facts: the limits need no call either
        prompts = [f"prompt number {i}" for i in range(5000)]
        with client(g.url) as c:
            response = c.post("/completion", json={"prompt": prompts, "n_predict": 2})
            other = c.post("/v1/completions", json={"prompt": prompts[:3], "max_tokens": 2})
        assert dict(seen) == {}  # not one /tokenize
        still_serves(g)
    assert response.status_code == 413
    message = response.json()["error"]["message"]
    assert "5000 prompts = 5000 engine tasks" in message and "at most 2 per request" in message
    assert (
        other.status_code == 413
        and "3 prompts = 3 engine tasks" in other.json()["error"]["message"]
    )
    assert g.state().refused["too_large"] == 2


def test_max_prompts_sets_the_cap(engine, gate) -> None:
    g = gate(engine, max_prompts=3)
    with client(g.url) as c:
        three = c.post("/v1/completions", json={"prompt": ["a", "b", "c"], "max_tokens": 2})
        four = c.post("/v1/completions", json={"prompt": ["a", "b", "c", "d"], "max_tokens": 2})
    assert three.status_code == 200 and len(three.json()["choices"]) == 3
    assert four.status_code == 413 and "max_prompts" in four.json()["error"]["message"]
    assert g.state().charged_tokens == 0


def test_a_list_of_prompts_is_counted_in_one_tokenize_call(engine, gate) -> None:
    prompts = ["Once upon a time", words(40)]
    with counting_relay(engine) as (relay, seen):
        g = gate(relay)
        with client(g.url) as c:
            response = c.post("/v1/completions", json={"prompt": prompts, "max_tokens": 2})
        assert seen["/tokenize"] == 1
    assert response.status_code == 200 and len(response.json()["choices"]) == 2
    assert g.state().charged_tokens == 0


def test_the_one_call_split_is_each_prompts_exact_count(engine, gate) -> None:
    """Charged exactly: a budget of the exact counts (the engine's own, one prompt at a
    time) and the completions admits the list; one token less refuses it."""
    prompts = ["Once upon a time", words(40), [1, 2, 3, 4, 5]]
    exact = sum(tokens(engine, p) for p in prompts[:2]) + 5 + 3 * 2
    g = gate(engine, max_prompts=3, token_budget=exact)
    g_less = gate(engine, max_prompts=3, token_budget=exact - 1)
    with client(g.url) as c, client(g_less.url) as c_less:
        fits = c.post("/v1/completions", json={"prompt": prompts, "max_tokens": 2})
        over = c_less.post("/v1/completions", json={"prompt": prompts, "max_tokens": 2})
    assert fits.status_code == 200 and len(fits.json()["choices"]) == 3
    assert over.status_code == 413
    assert g.state().charged_tokens == 0 and g_less.state().charged_tokens == 0


@pytest.mark.parametrize("path", [CHAT, "/completion"])
def test_n_is_charged_as_n_tasks(engine, gate, path) -> None:
    g = gate(engine)
    body = {"n": 2, "max_tokens": 900, "n_predict": 900, "ignore_eos": True, "stream": True}
    if path == CHAT:
        body["messages"] = [{"role": "user", "content": "Count slowly."}]
    else:
        body["prompt"] = "Count slowly:"
    c = client(g.url)
    stream = c.send(c.build_request("POST", path, json=body), stream=True)
    try:
        assert stream.status_code == 200
        next(stream.iter_raw())
        state = g.state()
        assert state.running == 2  # two engine tasks, two places: nothing else runs beside
        assert state.charged_tokens > 2 * 900
        with client(g.url, timeout=1.5) as other, pytest.raises(httpx.ReadTimeout):
            other.post(CHAT, json=GOOD)  # waits in the gate, not in the engine
    finally:
        stream.close()
        c.close()
    wait_for(lambda: (s := g.state()).running == 0 and s.charged_tokens == 0, timeout_s=60)


def test_n_above_the_slots_or_not_a_count_is_refused(engine, gate) -> None:
    g = gate(engine)
    with client(g.url) as c:
        three = c.post(CHAT, json={**GOOD, "n": 3})
        bad = c.post(CHAT, json={**GOOD, "n": "2"})
    assert three.status_code == 413
    assert "1 prompt × n=3 = 3 engine tasks" in three.json()["error"]["message"]
    assert bad.status_code == 400 and "'n'" in bad.json()["error"]["message"]
    still_serves(g)
