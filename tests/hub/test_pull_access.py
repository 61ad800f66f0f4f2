"""Gated, private, missing and unreachable: each a clear error with the next step; offline uses the cache."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.hub.download import pull
from homelab.hub.errors import (
    HubAuthError,
    HubNetworkError,
    HubNotFoundError,
    HubOfflineError,
    QuantNotFoundError,
)
from tests.hubstub import HubStub

REPO = "org/Tiny-GGUF"


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub(
        {
            REPO: {
                "Tiny-Q4_K_M.gguf": tiny_gguf("q4.gguf", seed=1),
                "Tiny-Q8_0.gguf": tiny_gguf("q8.gguf", seed=2),
                "Tiny-IQ2_XXS.gguf": tiny_gguf("iq2.gguf", seed=3),
            },
            "org/Gated-GGUF": {"Gated-Q4_K_M.gguf": tiny_gguf("g.gguf", seed=4)},
            "org/Private-GGUF": {"Private-Q4_K_M.gguf": tiny_gguf("p.gguf", seed=5)},
            "org/Safetensors": {"model.safetensors": b"\0" * 64},
        },
        gated={"org/Gated-GGUF"},
        private={"org/Private-GGUF"},
    )


def test_gated_repo_without_a_token_says_how_to_log_in(stub: HubStub) -> None:
    with pytest.raises(HubAuthError) as raised:
        pull("org/Gated-GGUF")
    error = raised.value
    assert "gated" in error.message and "401" in error.message
    assert "HF_TOKEN" in (error.hint or "") and "hf auth login" in (error.hint or "")
    assert f"{stub.endpoint}/org/Gated-GGUF" in (error.hint or "")


def test_gated_repo_with_a_token_without_access_is_403(
    stub: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.require_token("hf_granted")
    monkeypatch.setenv("HF_TOKEN", "hf_not_granted")
    with pytest.raises(HubAuthError) as raised:
        pull("org/Gated-GGUF")
    assert "403" in raised.value.message and "not been granted" in raised.value.message


def test_hf_token_opens_gated_and_private_repos_and_is_not_sent_to_the_cdn(
    stub: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.require_token("hf_granted")
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    assert pull("org/Gated-GGUF").paths[0].is_file()
    assert pull("org/Private-GGUF").paths[0].is_file()
    assert {r.authorization for r in stub.requests if r.host == "hub"} == {"Bearer hf_granted"}
    assert {r.authorization for r in stub.requests if r.host == "cdn"} == {None}


def test_the_token_file_of_hf_auth_login_is_used(stub: HubStub, hf_home: Path) -> None:
    stub.require_token("hf_from_file")
    (hf_home / "token").write_text("hf_from_file\n")
    assert pull("org/Gated-GGUF").paths[0].is_file()


def test_private_repo_without_a_token(stub: HubStub) -> None:
    with pytest.raises(HubNotFoundError) as raised:
        pull("org/Private-GGUF")
    assert "private" in raised.value.message and "HF_TOKEN" in (raised.value.hint or "")


def test_unknown_repo(stub: HubStub, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(HubNotFoundError) as raised:
        pull("org/No-Such-GGUF")
    assert "org/No-Such-GGUF" in raised.value.message
    assert main(["pull", "org/No-Such-GGUF"]) == 1
    assert "Not found on the Hub" in capsys.readouterr().err


def test_unknown_quant_lists_the_quants_there_are(stub: HubStub) -> None:
    with pytest.raises(QuantNotFoundError) as raised:
        pull(f"{REPO}:Q5_K_M")
    error = raised.value
    assert error.available == ("IQ2_XXS", "Q4_K_M", "Q8_0")
    size = stub.file(REPO, "Tiny-Q8_0.gguf").size
    assert (
        "Q8_0 (" in error.message
        and "Q5_K_M" in error.message
        and f"{size / 1024:.2f} KiB" in error.message
    )
    assert [r for r in stub.requests if r.host == "cdn"] == []


def test_unknown_file_and_a_repo_without_gguf(stub: HubStub) -> None:
    with pytest.raises(QuantNotFoundError, match="Tiny-Q5_0.gguf.*Q4_K_M"):
        pull(f"{REPO}/Tiny-Q5_0.gguf")
    with pytest.raises(QuantNotFoundError, match="no GGUF model files"):
        pull("org/Safetensors")


def _closed_port_endpoint() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_unreachable_hub_without_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_endpoint())
    with pytest.raises(HubNetworkError) as raised:
        pull(REPO)
    assert "cannot reach" in raised.value.message


def test_unreachable_hub_falls_back_to_the_cache_and_says_so(
    stub: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    online = pull(REPO)
    monkeypatch.setenv("HF_ENDPOINT", _closed_port_endpoint())
    model = pull(REPO)
    assert model.paths == online.paths and model.from_cache
    assert model.note is not None and "unreachable" in model.note


def test_offline_uses_the_cache_without_asking_the_hub(
    stub: HubStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    online = pull(f"{REPO}:Q8_0")
    asked = len(stub.requests)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = pull(f"{REPO}:q8_0")
    assert (
        model.paths == online.paths and model.revision == online.revision and model.quant == "Q8_0"
    )
    assert model.from_cache and model.note is not None and "offline" in model.note
    assert main(["pull", f"{REPO}:Q8_0"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(online.paths[0])
    assert "offline (HF_HUB_OFFLINE): using cached files" in captured.err
    assert len(stub.requests) == asked


def test_offline_without_cache_is_a_clear_error(
    stub: HubStub, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(HubOfflineError) as raised:
        pull(REPO, offline=True)
    assert "nothing of org/Tiny-GGUF is in the cache" in raised.value.message
    assert main(["pull", REPO, "--offline"]) == 1
    assert "Offline" in capsys.readouterr().err
    assert stub.requests == []


def test_offline_with_another_quant_cached_lists_what_is(stub: HubStub) -> None:
    pull(f"{REPO}:Q8_0")
    with pytest.raises(HubOfflineError) as raised:
        pull(f"{REPO}:Q4_K_M", offline=True)
    assert "Q4_K_M" in raised.value.message and "cached: Q8_0" in raised.value.message
