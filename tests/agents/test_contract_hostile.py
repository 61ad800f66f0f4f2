"""The contract check when the server misbehaves: a dead gate, a route answering 404 or 500,
one too slow to answer, one answering garbage. Each is a verdict in words, never a raise.

The misbehaving server is a stand-in on 127.0.0.1 (real HTTP): llama-server itself does
none of these on purpose. The well-behaved answers it gives are those llama-server's
routes give (one structured tool call each), so the same reading passes them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from homelab.agents.contract import (
    AGENT_ROUTES,
    NO_TOOL_CALLS,
    TOOL_NAME,
    check,
    probe_routes,
    verdict,
)
from homelab.agents.target import AgentTarget, RequestContext
from tests.factory.server_log import free_port

CALL = {"name": TOOL_NAME, "arguments": json.dumps({"path": "hello.txt", "content": "hi"})}
GOOD = {
    "/v1/chat/completions": {
        "choices": [{"message": {"role": "assistant", "tool_calls": [{"function": CALL}]}}]
    },
    "/v1/messages": {
        "type": "message",
        "content": [
            {"type": "tool_use", "name": TOOL_NAME, "input": {"path": "a", "content": "b"}}
        ],
    },
    "/v1/messages/count_tokens": {"input_tokens": 42},
    "/v1/responses": {"output": [{"type": "function_call", **CALL}]},
}
TEXT_ONLY = {"choices": [{"message": {"role": "assistant", "content": "Sure! hello.txt"}}]}


class Behaviour:
    """What the stand-in does per route: ``good``, ``text``, ``404``, ``500``, ``jinja``,
    ``slow``, ``garbage``; and the requests it saw."""

    def __init__(self) -> None:
        self.routes: dict[str, str] = {}
        self.seen: list[tuple[str, dict, str | None]] = []


def stand_in(behaviour: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            behaviour.seen.append((self.path, body, self.headers.get("Authorization")))
            mode = behaviour.routes.get(self.path, "good")
            if mode == "slow":
                time.sleep(3)
                mode = "good"
            status, data = 200, GOOD.get(self.path, {})
            if mode == "text":
                data = TEXT_ONLY
            elif mode in ("404", "500"):
                status, data = int(mode), {"error": {"message": f"mode {mode}"}}
            elif mode == "jinja":
                status, data = 500, {"error": {"message": "tools param requires --jinja flag"}}
            raw = b"<html>not json{" if mode == "garbage" else json.dumps(data).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except OSError:  # the client gave up (the slow case)
                pass

    return Handler


@pytest.fixture
def server() -> Iterator[tuple[Behaviour, str]]:
    behaviour = Behaviour()
    httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), stand_in(behaviour))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield behaviour, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def target_at(url: str, key: str | None = None) -> AgentTarget:
    return AgentTarget(url, "m", RequestContext(4096, "test"), 2048, api_key=key)


def test_a_server_that_answers_as_llama_server_does_passes_every_agent(server) -> None:
    behaviour, url = server
    for agent in AGENT_ROUTES:
        judged = check(agent, target_at(url, key="k-1"))
        assert judged.ok and judged.line == "tool calls: ok", (agent, judged)
        assert [p.route for p in judged.probes] == list(AGENT_ROUTES[agent])
    assert {path for path, _, _ in behaviour.seen} == set(GOOD)
    assert all(auth == "Bearer k-1" for _, _, auth in behaviour.seen)
    asked = {path: body for path, body, _ in behaviour.seen}
    assert asked["/v1/chat/completions"]["tool_choice"] == "required"
    assert asked["/v1/messages"]["tool_choice"] == {"type": "any"}
    assert asked["/v1/responses"]["tools"][0]["name"] == TOOL_NAME


def test_a_text_answer_is_a_template_that_emits_no_tool_calls(server) -> None:
    behaviour, url = server
    behaviour.routes["/v1/chat/completions"] = "text"
    judged = check("opencode", target_at(url))
    assert not judged.ok and judged.line == NO_TOOL_CALLS
    assert judged.probes[0].tool_call is False and judged.probes[0].status == 200


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("404", "/v1/responses: HTTP 404: mode 404"),
        ("500", "/v1/responses: HTTP 500: mode 500"),
        ("jinja", "/v1/responses: the server runs without --jinja: it refuses tools"),
        ("garbage", "/v1/responses: answered with no /v1/responses JSON: '<html>not json{'"),
    ],
)
def test_a_broken_route_is_named_in_the_verdict(server, mode: str, words: str) -> None:
    behaviour, url = server
    behaviour.routes["/v1/responses"] = mode
    judged = check("codex", target_at(url))
    assert not judged.ok and judged.line == words
    assert check("aider", target_at(url)).ok  # the chat route still works


def test_claude_code_needs_count_tokens_too(server) -> None:
    behaviour, url = server
    behaviour.routes["/v1/messages/count_tokens"] = "404"
    judged = check("claude", target_at(url))
    assert not judged.ok and judged.line.startswith("/v1/messages/count_tokens: HTTP 404")
    assert judged.probes[0].ok  # /v1/messages itself answered with a tool call


def test_a_slow_endpoint_is_a_timeout_not_a_hang(server) -> None:
    behaviour, url = server
    behaviour.routes["/v1/chat/completions"] = "slow"
    started = time.monotonic()
    probes = probe_routes(target_at(url), ("/v1/chat/completions",), timeout_s=0.5)
    assert time.monotonic() - started < 2.5  # gave up before the 3 s answer
    assert not probes[0].ok and probes[0].detail == "no answer in 0.5 s"
    assert probes[0].status is None
    assert verdict("continue", probes).line.startswith("/v1/chat/completions: no answer in")


def test_a_dead_gate_is_a_verdict() -> None:
    judged = check("claude", target_at(f"http://127.0.0.1:{free_port()}"))
    assert not judged.ok and "no answer (ConnectError)" in judged.line
    assert len(judged.probes) == 2  # both routes tried, neither raised
