"""The gate's log of its requests (``homelab.gate.access``), against the real llama-server:
one line per request with its route, status and charge; no key in it; garbage lines read as
nothing."""

from __future__ import annotations

import logging

import pytest

from homelab.gate.access_log import PREFIX, Entry, entry_of_line
from tests.gate.conftest import SPLIT_FACTS, client, hold, wait_for, words
from tests.gate.lingering_relay import lingering_relay

pytestmark = pytest.mark.engine
KEY = "sk-secret-0451"


def logged(caplog: pytest.LogCaptureFixture) -> list[Entry]:
    found = [entry_of_line(r.getMessage()) for r in caplog.records]
    return [e for e in found if e is not None]


def test_each_request_is_logged_with_its_route_status_and_charge(
    engine, gate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="homelab.gate.access")
    g = gate(engine, api_key=KEY, max_tokens_cap=16)
    auth = {"Authorization": f"Bearer {KEY}", "User-Agent": "probe/1.0"}
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    with client(g.url) as c:
        assert c.post("/v1/chat/completions", json=body, headers=auth).status_code == 200
        streamed = c.post("/v1/messages", json={**body, "stream": True}, headers=auth)
        assert streamed.status_code == 200
        assert c.get("/v1/models", headers=auth).status_code == 200
        assert c.post("/v1/chat/completions", json=body).status_code == 401  # no key
        assert c.post("/v1/chat/completions", content=b"{", headers=auth).status_code == 400
        huge = {**body, "messages": [{"role": "user", "content": words(3000)}]}
        assert c.post("/v1/chat/completions", json=huge, headers=auth).status_code == 413
    entries = logged(caplog)
    assert [(e.method, e.path, e.status) for e in entries] == [
        ("POST", "/v1/chat/completions", 200),
        ("POST", "/v1/messages", 200),
        ("GET", "/v1/models", 200),
        ("POST", "/v1/chat/completions", 401),
        ("POST", "/v1/chat/completions", 400),
        ("POST", "/v1/chat/completions", 413),
    ]
    chat, stream, models, unauthorized, malformed, too_large = entries
    ceiling = SPLIT_FACTS.ctx_per_slot
    for done in (chat, stream):
        charge = done.charge
        assert charge is not None and charge["asked_max_tokens"] == 4 and charge["model"] == "m"
        assert charge["completion_cap"] == 4 and charge["ceiling_tokens"] == ceiling
        prompt = charge["prompt_tokens"]
        assert isinstance(prompt, int) and charge["charged_tokens"] == prompt + 4
        engine_prompt = charge["engine_prompt_tokens"]
        assert isinstance(engine_prompt, int) and 0 < engine_prompt <= prompt  # never under
        assert charge["engine_completion_tokens"] == 4 and charge["engine_error"] is None
    assert stream.charge is not None and stream.charge["stream"] is True
    assert chat.headers["user-agent"] == "probe/1.0" and chat.headers["authorization"] == ""
    assert models.charge is None and unauthorized.charge is None and malformed.charge is None
    assert too_large.charge is not None and too_large.charge["completion_cap"] == 0
    assert too_large.charge["prompt_tokens"] > ceiling  # refused: it could never fit
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert KEY not in text  # the key never reaches the log


def test_other_lines_read_as_no_entry() -> None:
    assert entry_of_line("04:10:00 gate limits: …") is None
    assert entry_of_line(PREFIX + "{not json") is None
    assert entry_of_line(PREFIX + '{"method": "GET"}') is None  # fields missing
    entry = Entry("GET", "/health", 200, 0.01, {})
    assert entry_of_line("04:10:00 " + entry.line()) == entry


def _read_to_last_event_and_close(url: str, path: str, body: dict) -> str:
    """Stream ``body`` to ``path`` and close the connection as soon as the last event has
    arrived (as Codex does after ``response.completed``); the text read."""
    with client(url) as c:
        request = c.build_request("POST", path, json={**body, "stream": True})
        response = c.send(request, stream=True)
        assert response.status_code == 200
        read = ""
        for text in response.iter_text():
            read += text
            if any(f"{e}\n" in read for e in ("response.completed", "message_stop")):
                break
        response.close()  # before the engine's end of stream reaches the gate
    return read


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"input": "Say hi", "max_output_tokens": 6}),
        ("/v1/messages", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6}),
    ],
)
def test_a_client_that_closes_after_the_last_event_was_answered(
    engine, gate, caplog: pytest.LogCaptureFixture, path: str, body: dict
) -> None:
    """Codex closes its connection once ``response.completed`` is read: the answer was whole,
    so the log says 200 with the engine's own counts (CI once saw it logged 499, no counts).
    The relay holds the engine's end of stream back, so the gate is still waiting for it."""
    caplog.set_level(logging.INFO, logger="homelab.gate.access")
    with lingering_relay(engine) as relayed:
        g = gate(relayed)
        read = _read_to_last_event_and_close(g.url, path, {"model": "m", **body})
        entry = wait_for(lambda: next(iter(logged(caplog)), None), what="the request logged")
    assert "response.completed" in read or "message_stop" in read
    assert (entry.path, entry.status) == (path, 200), entry
    charge = entry.charge
    assert charge is not None and charge["delivered"] is True
    assert isinstance(charge["engine_prompt_tokens"], int) and charge["engine_prompt_tokens"] > 0
    assert charge["engine_completion_tokens"] == 6


def test_a_client_that_leaves_mid_answer_is_logged_499(
    engine, gate, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="homelab.gate.access")
    g = gate(engine)
    held = hold(g.url)  # a stream that generates until its client leaves
    held.close()
    entry = wait_for(lambda: next(iter(logged(caplog)), None), what="the request logged")
    assert entry.status == 499 and entry.charge is not None
    assert entry.charge["delivered"] is False
