"""The gate's ``[sampling]`` defaults: read from gate.toml (hostile tables refused, named),
written into a request only where the client left a setting out, and applied by the real
llama-server on each completion route (its ``/slots`` shows the sampling a task ran with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.errors import UsageError
from homelab.gate.config_file import GateChoices, read_config, resolve_gate
from homelab.gate.requests import ANTHROPIC_SAMPLING, ROUTES, forwarded_body, parse
from homelab.gate.sampling import KNOWN, unreachable
from tests.gate.conftest import client

CHAT = ROUTES["/v1/chat/completions"]
DEFAULTS = (("temperature", 0), ("top_k", 5), ("seed", 7), ("min_p", 0.125))
ENGINE_DEFAULTS = {"seed": 4294967295, "min_p": pytest.approx(0.05)}
"""llama-server's own, where a route drops the gate's (``LLAMA_DEFAULT_SEED``: random)."""


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return path


def test_the_table_is_read_in_its_order_and_reaches_the_settings(tmp_path: Path) -> None:
    path = _toml(
        tmp_path, "max_concurrent = 1\n[sampling]\ntemperature = 0.6\ntop_k = 20\nseed = 3\n"
    )
    assert read_config(path).sampling == (("temperature", 0.6), ("top_k", 20), ("seed", 3))
    settings = resolve_gate(GateChoices(), 8080, config=path).settings
    assert settings.sampling == (("temperature", 0.6), ("top_k", 20), ("seed", 3))
    assert resolve_gate(GateChoices(), 8080, config=tmp_path / "none.toml").settings.sampling == ()


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[sampling]\ntemperature = true\n", "temperature must be a number"),
        ("[sampling]\ntemperature = nan\n", "temperature must be a number"),
        ("[sampling]\ntemperature = -1\n", "temperature must be a number"),
        ("[sampling]\ntop_p = 1.5\n", "top_p must be a number from 0 to 1"),
        ("[sampling]\ntop_k = 2.5\n", "top_k must be a whole number"),
        ("[sampling]\nseed = -1\n", "seed must be a whole number"),
        ("[sampling]\nseed = 4294967295\n", "seed must be a whole number"),
        ("[sampling]\ntemprature = 0\n", "sets temprature, which the gate does not know"),
        ("[sampling]\n[sampling.temperature]\nx = 1\n", "temperature must be a number"),
        ('sampling = "greedy"\n', "[sampling] must be a table"),
    ],
)
def test_a_bad_table_is_refused_naming_the_setting_and_the_file(
    tmp_path: Path, text: str, named: str
) -> None:
    path = _toml(tmp_path, text)
    with pytest.raises(UsageError) as caught:
        read_config(path)
    assert named in caught.value.message
    assert str(path) in caught.value.message


def test_only_what_the_client_left_out_is_written() -> None:
    raw = b'{"messages":[{"role":"user","content":"hi"}],"temperature":1.0,"max_tokens":8}'
    sent = json.loads(forwarded_body(parse(CHAT, raw), 8, None, DEFAULTS))
    assert sent["temperature"] == 1.0  # the client's own
    assert (sent["top_k"], sent["seed"], sent["min_p"]) == (5, 7, 0.125)
    assert forwarded_body(parse(CHAT, raw), 8, None, ()) == raw  # no defaults: its own bytes


def test_a_setting_sent_as_null_is_filled_and_the_body_stays_one_json_object() -> None:
    raw = b'{"messages":[{"role":"user","content":"hi"}],"seed":null}'
    sent = forwarded_body(parse(CHAT, raw), 8, None, DEFAULTS)
    assert sent.count(b'"seed"') == 1  # rewritten, not a second key after the first
    assert json.loads(sent)["seed"] == 7


ROUTE_BODIES = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    "/v1/messages": {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
    },
    "/v1/responses": {"model": "m", "input": "Hi", "max_output_tokens": 4},
    "/completion": {"prompt": "Hi", "n_predict": 4},
}


@pytest.mark.engine
@pytest.mark.parametrize("route", list(ROUTE_BODIES))
def test_the_engine_samples_with_the_gates_defaults_and_the_clients_own(
    engine, gate, route: str
) -> None:
    carried = ROUTES[route].sampling_fields or KNOWN
    g = gate(engine, sampling=DEFAULTS, max_concurrent=1)
    with client(g.url) as through, client(engine) as direct:
        answer = through.post(route, json=ROUTE_BODIES[route])
        assert answer.status_code == 200, answer.text
        ran = _last_task_params(direct.get("/slots").json())
        for name, value in DEFAULTS:
            if name in carried:
                assert ran[name] == pytest.approx(value), name
            else:  # the route drops it: the engine's own default (a random seed, min-p 0.05)
                assert ran[name] == ENGINE_DEFAULTS[name], name
        answer = through.post(route, json={**ROUTE_BODIES[route], "temperature": 0.5})
        assert answer.status_code == 200, answer.text
        ran = _last_task_params(direct.get("/slots").json())
        assert ran["temperature"] == pytest.approx(0.5) and ran["top_k"] == 5


def test_the_anthropic_route_gets_only_what_it_carries_and_the_serve_says_so() -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}'
    sent = json.loads(forwarded_body(parse(ROUTES["/v1/messages"], raw), 8, None, DEFAULTS))
    assert (sent["temperature"], sent["top_k"]) == (0, 5)
    assert "seed" not in sent and "min_p" not in sent
    said = unreachable(DEFAULTS, ANTHROPIC_SAMPLING)
    assert said is not None and "seed, min_p" in said and "/v1/messages" in said
    assert unreachable((("temperature", 0.2),), ANTHROPIC_SAMPLING) is None


def _last_task_params(slots: list[dict]) -> dict:
    """The sampling of the most recent task (the slot whose task id is highest)."""
    done = [s for s in slots if s.get("id_task", -1) >= 0]
    assert done, slots
    return max(done, key=lambda s: s["id_task"])["params"]
