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

import pytest

from tests.gate.conftest import client

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
