"""The gate on loopback against web pages (real llama-server, real HTTP on 127.0.0.1): a
request addressed to a foreign name (DNS rebinding) or sent by a page of another origin
(blind CSRF: ``text/plain`` JSON, no preflight) is refused 403 before it reaches the engine;
agents, SDKs and homelab's own clients (no ``Origin``, ``Host: 127.0.0.1:PORT``) are served;
CORS is answered only for the origins a person allowed.

Found by an adversarial pass (issue 22): ``Host: attacker.example``, ``Origin:
http://attacker.example``, ``Content-Type: text/plain`` → 200.
"""

from __future__ import annotations

import json

import pytest

from homelab.errors import UsageError
from homelab.gate.config_file import read_config
from homelab.gate.settings import GateSettings
from homelab.gate.trust import host_name
from tests.gate.conftest import client

pytestmark = pytest.mark.engine

CHAT = "/v1/chat/completions"
GOOD = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2})
PAGE = "http://localhost:3000"


def post(url: str, path: str = CHAT, **headers: str):
    with client(url) as c:
        return c.post(path, content=GOOD, headers={"Content-Type": "text/plain", **headers})


def port_of(url: str) -> str:
    return url.rsplit(":", 1)[1]


@pytest.mark.parametrize("path", [CHAT, "/v1/messages", "/v1/models", "/health"])
def test_a_foreign_host_is_refused(engine, gate, path) -> None:
    g = gate(engine)
    with client(g.url) as c:
        response = c.request(
            "POST" if path in (CHAT, "/v1/messages") else "GET",
            path,
            content=GOOD,
            headers={"Host": f"attacker.example:{port_of(g.url)}"},
        )
    assert response.status_code == 403
    body = response.json()
    assert "attacker.example" in body["error"]["message"]
    if path == "/v1/messages":
        assert body["error"]["type"] == "permission_error"
    else:
        assert body["error"]["code"] == "forbidden_host"
    assert g.state().admitted == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.0.2", "LOCALHOST."])
def test_loopback_names_are_served(engine, gate, host) -> None:
    g = gate(engine)
    response = post(g.url, Host=f"{host}:{port_of(g.url)}")
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers  # no CORS unless configured
    assert g.state().charged_tokens == 0


def test_a_cross_origin_page_is_refused_even_with_a_loopback_host(engine, gate) -> None:
    g = gate(engine)
    response = post(g.url, Origin="http://attacker.example")
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "forbidden_origin" and "allowed_origins" in error["message"]
    state = g.state()
    assert (state.admitted, state.charged_tokens) == (0, 0)
    assert post(g.url).status_code == 200  # the same request without Origin: an SDK


def test_an_allowed_origin_gets_cors_and_its_preflight(engine, gate) -> None:
    g = gate(engine, allowed_origins=(PAGE,), api_key="k-123")
    with client(g.url) as c:
        preflight = c.options(
            CHAT,
            headers={
                "Origin": PAGE,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        keyless = c.post(CHAT, content=GOOD, headers={"Origin": PAGE})
        answered = c.post(CHAT, content=GOOD, headers={"Origin": PAGE, "x-api-key": "k-123"})
        other = c.post(CHAT, content=GOOD, headers={"Origin": "http://evil.example"})
    assert preflight.status_code == 204  # a preflight carries no key
    assert preflight.headers["access-control-allow-origin"] == PAGE
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "authorization, content-type"
    assert keyless.status_code == 401  # the key still guards the request itself
    assert answered.status_code == 200
    assert answered.headers["access-control-allow-origin"] == PAGE
    assert other.status_code == 403
    assert g.state().charged_tokens == 0


def test_homelabs_own_clients_are_served(engine, gate) -> None:
    """The agents' contract check and the TUI's probes dial the gate's URL."""
    from homelab.gate.client import read_gate_state

    g = gate(engine)
    assert read_gate_state(g.url) is not None
    with client(g.url) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/v1/models").status_code == 200


def test_allowed_origins_are_checked_in_settings_and_gate_toml(tmp_path) -> None:
    with pytest.raises(UsageError, match="allowed_origins"):
        GateSettings(port=0, allowed_origins=("localhost:3000",)).check()
    GateSettings(port=0, allowed_origins=(PAGE, "https://app.example")).check()
    toml = tmp_path / "gate.toml"
    toml.write_text('allowed_origins = ["http://localhost:3000"]\n')
    assert read_config(toml).allowed_origins == (PAGE,)
    toml.write_text("allowed_origins = [3000]\n")
    with pytest.raises(UsageError, match="allowed_origins"):
        read_config(toml)


@pytest.mark.parametrize(
    ("header", "name"),
    [("127.0.0.1:8080", "127.0.0.1"), ("[::1]:80", "::1"), ("localhost", "localhost")],
)
def test_host_name(header, name) -> None:
    assert host_name(header) == name
