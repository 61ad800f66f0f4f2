"""The gate's settings as a person sets them: gate.toml (errors name the setting and the
file), the serve's own settings over it, and the API key file (0600, made once)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from homelab.engine.supervision.record import EngineRecord
from homelab.errors import UsageError
from homelab.gate.config_file import GateChoices, config_path, read_config, resolve_gate
from homelab.gate.key_file import key_path, load_or_create_key
from homelab.paths import config_dir


def _write_config(text: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_file_is_read_and_the_serve_settings_win() -> None:
    assert config_path() == config_dir() / "gate.toml"
    assert read_config() == GateChoices()  # no file: nothing set
    _write_config("max_concurrent = 1\ntoken_budget = 3000\nqueue_timeout_s = 12.5\n")
    resolved = resolve_gate(GateChoices(token_budget=2000), 8080)
    settings = resolved.settings
    assert (settings.max_concurrent, settings.token_budget) == (1, 2000)  # the flag won
    assert settings.queue_timeout_s == 12.5 and settings.port == 8080
    assert settings.host == "127.0.0.1" and settings.api_key is None  # loopback: no key
    assert resolved.key_created is None and not key_path().exists()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("max_concurrent = [", "is not valid TOML"),
        ("max_concurrent = 0", "max_concurrent in"),
        ('token_budget = "lots"', "token_budget in"),
        ("queue_timeout_s = -1", "queue_timeout_s in"),
        ("affinity = 1", "affinity in"),
        ("port = 9000", "sets port, which the gate does not know"),
        ("budget = 9000", "sets budget, which the gate does not know"),
    ],
)
def test_a_bad_file_names_the_setting_and_the_file(text: str, words: str) -> None:
    path = _write_config(text + "\n")
    with pytest.raises(UsageError) as caught:
        resolve_gate(GateChoices(), 8080)
    error = caught.value
    assert words in error.message and str(path) in error.message, error.message
    assert error.title == "Bad gate settings"


def test_a_bad_serve_setting_is_named() -> None:
    with pytest.raises(UsageError, match="max_concurrent given to serve must be"):
        resolve_gate(GateChoices(max_concurrent=0), 8080)


def test_off_loopback_gets_a_private_key_made_once(tmp_path: Path) -> None:
    first = resolve_gate(GateChoices(host="127.0.0.2"), 8080)
    key = first.settings.api_key
    assert key and len(key) >= 40 and first.key_created == key_path()
    assert stat.S_IMODE(os.stat(key_path()).st_mode) == 0o600
    assert key_path().read_text().strip() == key
    again = resolve_gate(GateChoices(host="127.0.0.2"), 8080)
    assert again.settings.api_key == key and again.key_created is None  # said once only
    # loopback with require_api_key set in the file uses the same key
    _write_config("require_api_key = true\n")
    assert resolve_gate(GateChoices(), 8080).settings.api_key == key


def test_a_key_file_others_may_read_is_refused() -> None:
    key, made = load_or_create_key()
    assert made
    os.chmod(key_path(), 0o644)
    with pytest.raises(UsageError, match="may be read by others") as caught:
        resolve_gate(GateChoices(host="0.0.0.0"), 8080)
    assert "chmod 600" in (caught.value.hint or "")


def test_an_empty_key_file_is_refused() -> None:
    path = key_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    with pytest.raises(UsageError, match="does not hold one key"):
        load_or_create_key()


def _record(**extra: object) -> dict[str, object]:
    return {
        "version": 1,
        "engine": "llama.cpp",
        "pid": 4242,
        "pgid": 4242,
        "create_time": 1.0,
        "argv": ["llama-server"],
        "host": "127.0.0.1",
        "port": 8081,
        "model": "/m.gguf",
        "log_path": "/l.log",
        "started_at": 1.0,
        "detached": True,
        **extra,
    }


def test_the_record_names_the_gate_strictly() -> None:
    old = EngineRecord.from_json(_record())  # written before the gate: still a record
    assert old.gate_url is None and old.gate_budget_tokens is None
    assert old.public_url == "http://127.0.0.1:8081" and old.public_port == 8081
    gated = EngineRecord.from_json(
        _record(gate_url="http://127.0.0.1:8080", gate_budget_tokens=3481, gate_pid=77)
    )
    assert gated.public_url == "http://127.0.0.1:8080" and gated.public_port == 8080
    assert gated.url == "http://127.0.0.1:8081" and gated.gate_budget_tokens == 3481
    assert EngineRecord.from_json(gated.to_json()) == gated  # round trip
    for bad in (
        {"gate_url": 8080},
        {"gate_url": "127.0.0.1:8080"},
        {"gate_url": "http://127.0.0.1:99999"},
        {"gate_budget_tokens": "3481"},
        {"gate_budget_tokens": True},
        {"gate_budget_tokens": 0},
        {"gate_pid": 1.5},
    ):
        with pytest.raises((TypeError, ValueError)):
            EngineRecord.from_json(_record(**bad))
