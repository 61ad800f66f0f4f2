"""What the gate fuzz (``tests/gate/test_gate_fuzz.py``) found, each as a plain test against
the real gate and llama-server (SmolLM2, loopback), plus the parts alone.

- ``NaN``, ``Infinity`` and numbers beyond a double (``1e400``, a 400-digit integer) were
  read by the gate (Python's json reads them) and forwarded: llama-server's parser
  answered 500 ``server_error``. Now a 400 before admission, naming the number.
- llama-server answers a bad ``/v1/messages`` request with its OpenAI-shaped error; an
  Anthropic client reads ``{"type": "error", ...}``. Now rewritten in Anthropic's shape.
- The passed-through endpoints (``/tokenize``, ``/detokenize``, ``/apply-template``, the
  count endpoints) went to the engine as sent: an empty, truncated or UTF-16 body, a field
  of the wrong type, a token id past the vocabulary, ``messages`` missing, an image for a
  text model were all 500 ``server_error``. Now the body is checked as JSON (a count
  endpoint's as its route's), re-encoded as UTF-8 when it came in UTF-16 or with a BOM,
  and the engine's 500s that are the client's mistake are answered 400.
- ``max_tokens: 0`` (llama-server generates one token for it) was charged 0 completion
  tokens, which the gate reads as "the prompt fills the ceiling": a 413 saying the prompt
  "could never run". Now a bound of 0 counts as 1 and the request runs.
- An empty prompt with ``n`` > 1 on ``/completion`` or ``/v1/completions`` (``""``,
  ``[""]``, ``{"prompt_string": ""}``) is never answered by llama-server (b11312): it
  releases the prompt's own slot at once, and the other ``n − 1`` completions wait on
  their slots for a prompt that is never processed ("processing", 0 prompt tokens) until
  the client leaves. Found at 1,000 examples. Now a 400 before admission.
"""

from __future__ import annotations

import json
import logging

import pytest

from homelab.gate.errors import BadRequest
from homelab.gate.json_body import engine_bytes, load_body
from homelab.gate.replies import anthropic_engine_error, engine_client_error
from homelab.gate.requests import ROUTES, parse
from tests.gate.conftest import busy_slots, client
from tests.gate.test_gate_hostile import no_traceback, still_serves

CHAT = "/v1/chat/completions"
OUT_OF_RANGE = [
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": NaN}',
    b'{"messages": [{"role": "user", "content": "x"}, Infinity]}',
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": -Infinity}',
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e400}',
    b'{"messages": [{"role": "user", "content": "x"}], "id_slot": 1' + b"0" * 400 + b"}",
]


@pytest.mark.parametrize("raw", OUT_OF_RANGE)
def test_numbers_the_engine_cannot_read_are_refused_by_load_body(raw: bytes) -> None:
    with pytest.raises(BadRequest, match="a number the engine cannot read"):
        load_body(raw)


def test_numbers_in_range_still_parse() -> None:
    big = int("9" * 308)
    assert load_body(b'{"a": [%d, 1.5e308, -2, 0.0]}' % big) == {"a": [big, 1.5e308, -2, 0.0]}


def test_an_openai_shaped_engine_error_becomes_anthropic() -> None:
    sent = b'{"error":{"code":400,"message":"no content","type":"invalid_request_error"}}'
    body = json.loads(anthropic_engine_error(400, sent))
    assert body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "no content"},
    }
    assert json.loads(anthropic_engine_error(500, b"boom"))["error"] == {
        "type": "api_error",
        "message": "boom",
    }
    already = b'{"type":"error","error":{"type":"x","message":"m"}}'
    assert anthropic_engine_error(400, already) == already


@pytest.mark.engine
@pytest.mark.parametrize("raw", OUT_OF_RANGE)
def test_numbers_the_engine_cannot_read_are_a_400_before_admission(
    engine, gate, caplog, raw: bytes
) -> None:
    caplog.set_level(logging.INFO)
    g = gate(engine)
    with client(g.url) as c:
        response = c.post(CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert "a number the engine cannot read" in response.json()["error"]["message"]
    assert g.state().admitted == 0
    no_traceback(caplog.records)
    still_serves(g)


@pytest.mark.engine
def test_an_engine_400_on_the_anthropic_route_is_in_anthropic_shape(engine, gate) -> None:
    g = gate(engine)
    body = {"messages": [{"role": "user"}], "max_tokens": 2}  # no content: the engine's 400
    with client(g.url) as c:
        response = c.post("/v1/messages", json=body)
    assert response.status_code == 400
    answer = response.json()
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert "content" in answer["error"]["message"]
    still_serves(g)


def test_an_engine_500_that_is_the_clients_mistake_becomes_a_400() -> None:
    sent = b'{"error":{"code":500,"message":"[json.exception.type_error.302] type must be '
    sent += b'number, but is array","type":"server_error"}}'
    status, data = engine_client_error(500, sent)
    assert status == 400
    assert json.loads(data)["error"]["type"] == "invalid_request_error"
    assert "type must be number" in json.loads(data)["error"]["message"]
    other = b'{"error":{"code":500,"message":"out of memory","type":"server_error"}}'
    assert engine_client_error(500, other) == (500, other)
    assert engine_client_error(404, sent) == (404, sent)


def test_engine_bytes_are_utf8_without_a_bom() -> None:
    value = {"content": "h\u00e9"}
    assert engine_bytes(b'{"content": "h\\u00e9"}', value) == b'{"content": "h\\u00e9"}'
    for raw in (json.dumps(value).encode("utf-16"), b"\xef\xbb\xbf" + json.dumps(value).encode()):
        assert json.loads(engine_bytes(raw, value).decode("utf-8")) == value
        assert not engine_bytes(raw, value).startswith(b"\xef\xbb\xbf")


PASSED_THROUGH = [
    ("/tokenize", b""),
    ("/tokenize", b'{"content": "x"'),
    ("/tokenize", b'{"content": [[]]}'),
    ("/detokenize", b'{"tokens": null}'),
    ("/detokenize", b'{"tokens": [-1]}'),
    ("/apply-template", b'{"messages": [1, 2]'),
    ("/v1/chat/completions/input_tokens", b"{}"),
    (
        "/v1/chat/completions/input_tokens",
        b'{"messages": [{"role": "user", "content": [{"type": "image_url", "text": ""}]}]}',
    ),
]


@pytest.mark.engine
@pytest.mark.parametrize(("path", "raw"), PASSED_THROUGH)
def test_a_bad_passed_through_body_is_a_400(engine, gate, caplog, path, raw) -> None:
    caplog.set_level(logging.WARNING)
    g = gate(engine)
    with client(g.url) as c:
        response = c.post(path, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
    no_traceback(caplog.records)


@pytest.mark.engine
def test_anthropic_count_tokens_refuses_in_anthropic_shape(engine, gate) -> None:
    g = gate(engine)
    with client(g.url) as c:
        response = c.post("/v1/messages/count_tokens", json={})
    assert response.status_code == 400
    assert response.json()["type"] == "error"


@pytest.mark.engine
def test_a_utf16_body_is_passed_through_as_utf8(engine, gate) -> None:
    g = gate(engine)
    with client(g.url) as c:
        plain = c.post("/tokenize", json={"content": "Hello there"})
        wide = c.post(
            "/tokenize",
            content=json.dumps({"content": "Hello there"}).encode("utf-16"),
            headers={"Content-Type": "application/json"},
        )
    assert wide.status_code == 200, wide.text
    assert wide.json() == plain.json()


def test_a_bound_of_0_is_charged_as_the_one_token_the_engine_makes() -> None:
    body = b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}'
    assert parse(ROUTES[CHAT], body).max_tokens == 1
    assert parse(ROUTES["/completion"], b'{"prompt": "x", "n_predict": 0}').max_tokens == 1


@pytest.mark.engine
@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 0}),
        ("/completion", {"prompt": "Say hi.", "n_predict": 0}),
        ("/v1/messages", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 0}),
    ],
)
def test_max_tokens_0_runs(engine, gate, path, body) -> None:
    g = gate(engine)
    with client(g.url) as c:
        response = c.post(path, json=body)
    assert response.status_code == 200, response.text
    still_serves(g)


EMPTY_WITH_N = [
    ("/completion", {"prompt": "", "n": 2, "n_predict": 1}),
    ("/completion", {"prompt": [""], "n": 2, "stream": True}),
    ("/completion", {"prompt": {"prompt_string": ""}, "n": 2}),
    ("/v1/completions", {"prompt": "", "n": 2, "max_tokens": 1}),
]


@pytest.mark.parametrize(("path", "body"), EMPTY_WITH_N)
def test_an_empty_prompt_with_n_above_1_is_refused_by_parse(path, body) -> None:
    with pytest.raises(BadRequest, match="empty prompt cannot have 'n' above 1"):
        parse(ROUTES[path], json.dumps(body).encode())


def test_an_empty_prompt_alone_or_a_blank_one_still_parses() -> None:
    route = ROUTES["/completion"]
    assert parse(route, b'{"prompt": "", "n": 1}').tasks == 1
    assert parse(route, b'{"prompt": " ", "n": 2}').tasks == 2
    assert parse(route, b'{"prompt": {"prompt_string": "", "multimodal_data": ["x"]}, "n": 2}')


@pytest.mark.engine
@pytest.mark.parametrize(("path", "body"), EMPTY_WITH_N)
def test_an_empty_prompt_with_n_above_1_is_a_400_before_admission(engine, gate, path, body) -> None:
    g = gate(engine)
    with client(g.url, timeout=30.0) as c:  # the engine never answered it: a hang
        response = c.post(path, json=body)
    assert response.status_code == 400, response.text
    assert "'n' above 1" in response.json()["error"]["message"]
    assert g.state().admitted == 0
    assert busy_slots(engine) == []
    still_serves(g)
