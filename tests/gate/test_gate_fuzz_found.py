"""What the gate fuzz (``tests/gate/test_gate_fuzz.py``) found, each as a plain test against
the real gate and llama-server (SmolLM2, loopback), plus the parts alone.

- ``NaN``, ``Infinity`` and numbers beyond a double (``1e400``, a 400-digit integer) were
  read by the gate (Python's json reads them) and forwarded: llama-server's parser
  answered 500 ``server_error``. Now a 400 before admission, naming the number.
- llama-server answers a bad ``/v1/messages`` request with its OpenAI-shaped error; an
  Anthropic client reads ``{"type": "error", ...}``. Now rewritten in Anthropic's shape.
"""

from __future__ import annotations

import json
import logging

import pytest

from homelab.gate.errors import BadRequest
from homelab.gate.json_body import load_body
from homelab.gate.replies import anthropic_engine_error
from tests.gate.conftest import client
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
