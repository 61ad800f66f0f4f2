"""Every answer of the gate is JSON in its route family's error shape, the requests no route
takes included (real llama-server behind a real gate, raw HTTP on 127.0.0.1): an unknown
path is a 404, a method the route does not take a 405 with ``Allow``, a request aiohttp
cannot parse a 400 — OpenAI's ``{"error": {...}}``, Anthropic's under ``/v1/messages`` —
never aiohttp's plain text, never the request echoed (``TRACE``), whatever the path holds
(very long, ``%00``, ``..``). ``HEAD`` answers a GET route's headers; ``OPTIONS`` says what
a route takes, and is a CORS preflight only for an allowed origin.

Issue 22: aiohttp's plain ``404: Not Found`` / ``405: Method Not Allowed`` reached SDKs that
read JSON errors."""

from __future__ import annotations

import json

import pytest

from tests.gate.raw_http import Answer, address, parse_answer, send_raw

pytestmark = pytest.mark.engine

CHAT = "/v1/chat/completions"
SECRET = b"s3cr3t-cookie-value"


def request(url: str, method: bytes, path: bytes, *extra: bytes, body: bytes = b"") -> bytes:
    host, port = address(url)
    head = b"%s %s HTTP/1.1\r\nHost: %s:%d\r\n" % (method, path, host.encode(), port)
    head += b"".join(line + b"\r\n" for line in extra)
    head += b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    return send_raw(url, head + body, timeout_s=60.0)


def answer(url: str, method: bytes, path: bytes, *extra: bytes, body: bytes = b"") -> Answer:
    return parse_answer(request(url, method, path, *extra, body=body))


def openai_error(a: Answer, status: int) -> dict:
    assert a.status == status, a
    assert a.headers["content-type"].startswith("application/json"), a.headers
    error = a.json()["error"]
    assert set(error) == {"code", "message", "type"}, error
    return error


def anthropic_error(a: Answer, status: int) -> dict:
    assert a.status == status, a
    assert a.headers["content-type"].startswith("application/json"), a.headers
    body = a.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    return body["error"]


@pytest.fixture(scope="module")
def gate_url(engine, request) -> str:
    from homelab.gate.runner import GateRunner
    from homelab.gate.settings import GateSettings
    from tests.gate.conftest import SPLIT_FACTS

    runner = GateRunner(GateSettings(port=0), engine, SPLIT_FACTS)
    request.addfinalizer(runner.stop)
    return runner.start()


@pytest.mark.parametrize(
    "path",
    [
        b"/nope",
        b"/",
        b"/v1",
        b"/v1/nope",
        b"/v1/models%00",
        b"/v1/chat/completions%00.json",
        b"/%00",
        b"/v1/" + b"a" * 8000,
        b"/../../../etc/passwd",
        b"/v1/%2e%2e/%2e%2e/etc/passwd",
        b"/v1/chat/completions/../../../../etc/passwd",
        b"/health%2f..%2f..%2fetc%2fpasswd",
        b"/%ff%fe",
    ],
    ids=lambda path: path.decode()[:40],
)
def test_an_unknown_path_is_a_json_404(gate_url, path) -> None:
    raw = request(gate_url, b"POST", path, body=b"{}")
    a = parse_answer(raw)
    error = openai_error(a, 404)
    assert error["code"] == "not_found"
    assert len(error["message"]) < 400  # a long path is cut short when said back
    assert b"\x00" not in raw


def test_a_path_is_said_back_printable_and_short() -> None:
    from homelab.gate.http_errors import shown_path

    assert shown_path("/a\x00b") == "/a\\x00b"
    assert len(shown_path("/" + "x" * 5000)) <= 121


def test_a_typo_of_a_route_is_named(gate_url) -> None:
    error = openai_error(answer(gate_url, b"POST", b"/v1/chat/completion", body=b"{}"), 404)
    assert "/v1/chat/completions" in error["message"]


def test_an_unknown_anthropic_path_is_in_anthropic_shape(gate_url) -> None:
    error = anthropic_error(answer(gate_url, b"POST", b"/v1/messages/nope", body=b"{}"), 404)
    assert error["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        (b"PROPFIND", CHAT.encode(), {"POST", "OPTIONS"}),
        (b"DELETE", CHAT.encode(), {"POST", "OPTIONS"}),
        (b"GET", CHAT.encode(), {"POST", "OPTIONS"}),
        (b"PUT", b"/v1/models", {"GET", "HEAD", "OPTIONS"}),
        (b"POST", b"/health", {"GET", "HEAD", "OPTIONS"}),
        (b"SEARCH", b"/completion", {"POST", "OPTIONS"}),
    ],
)
def test_a_method_the_route_does_not_take_is_a_json_405_with_allow(
    gate_url, method, path, allowed
) -> None:
    a = answer(gate_url, method, path, body=b"{}")
    error = openai_error(a, 405)
    assert error["code"] == "method_not_allowed"
    assert set(a.headers["allow"].replace(" ", "").split(",")) == allowed


def test_a_wrong_method_on_messages_is_in_anthropic_shape(gate_url) -> None:
    a = answer(gate_url, b"GET", b"/v1/messages")
    anthropic_error(a, 405)
    assert "POST" in a.headers["allow"]


@pytest.mark.parametrize("path", [CHAT.encode(), b"/health", b"/nope"])
def test_trace_echoes_nothing(gate_url, path) -> None:
    raw = request(gate_url, b"TRACE", path, b"Cookie: " + SECRET, b"X-Echo: " + SECRET)
    a = parse_answer(raw)
    assert a.status in (404, 405)
    openai_error(a, a.status)
    assert SECRET not in raw


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"G\x01T /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"BREW /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: " + SECRET + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"b" * 9000 + b"\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n{}{}{}",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + SECRET + b"\r\n\r\n",
    ],
    ids=[
        "long-line",
        "bad-method",
        "unknown-method",
        "space-in-name",
        "long-header",
        "two-lengths",
        "tls",
    ],
)
def test_a_request_aiohttp_cannot_parse_is_a_json_400(gate_url, raw) -> None:
    sent = send_raw(gate_url, raw, timeout_s=60.0)
    a = parse_answer(sent)
    error = openai_error(a, 400)
    assert error["type"] == "invalid_request_error"
    assert SECRET not in sent and b"aaaaaaaa" not in a.body and b"bbbbbbbb" not in a.body


def test_head_answers_a_get_routes_headers(gate_url) -> None:
    for path in (b"/health", b"/v1/models", b"/props"):
        raw = request(gate_url, b"HEAD", path)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert body == b""


def test_options_says_what_a_route_takes_without_cors(gate_url) -> None:
    raw = request(gate_url, b"OPTIONS", CHAT.encode())
    head = raw.partition(b"\r\n\r\n")[0].decode().lower()
    assert head.startswith("http/1.1 204")
    assert "allow: options, post" in head
    assert "access-control-allow-origin" not in head and "access-control-allow-methods" not in head
    openai_error(answer(gate_url, b"OPTIONS", b"/nope"), 404)
    # a preflight from a page: refused, CORS is off unless configured
    a = answer(gate_url, b"OPTIONS", CHAT.encode(), b"Origin: http://evil.example")
    assert openai_error(a, 403)["code"] == "forbidden_origin"


def test_a_preflight_is_answered_only_for_an_allowed_origin_and_a_route(engine, gate) -> None:
    g = gate(engine, allowed_origins=("http://localhost:3000",))
    origin = b"Origin: http://localhost:3000"
    raw = request(g.url, b"OPTIONS", CHAT.encode(), origin, b"Access-Control-Request-Method: POST")
    assert raw.startswith(b"HTTP/1.1 204")
    assert b"Access-Control-Allow-Origin: http://localhost:3000" in raw
    a = answer(g.url, b"OPTIONS", b"/nope", origin, b"Access-Control-Request-Method: POST")
    openai_error(a, 404)


def test_every_error_is_json_even_with_a_key_required(engine, gate) -> None:
    g = gate(engine, api_key="k" * 32)
    assert openai_error(answer(g.url, b"GET", b"/nope"), 401)["code"] == "invalid_api_key"
    auth = b"Authorization: Bearer " + b"k" * 32
    openai_error(answer(g.url, b"GET", b"/nope", auth), 404)
    json.loads(answer(g.url, b"PROPFIND", CHAT.encode(), auth).body)


@pytest.mark.parametrize("path", [CHAT, "/v1/messages", "/tokenize"])
def test_a_body_past_64_mib_is_a_json_413(gate_url, path) -> None:
    body = b'{"prompt": "' + b"x" * (64 * 1024 * 1024 + 16) + b'"}'
    a = answer(gate_url, b"POST", path.encode(), b"Content-Type: application/json", body=body)
    if path == "/v1/messages":
        anthropic_error(a, 413)
    else:
        assert openai_error(a, 413)["code"] == "body_too_large"
