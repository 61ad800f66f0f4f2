"""Reading the engine's target: the gate's key file, and a gate bound to every address."""

from __future__ import annotations

import pytest

from homelab.agents.engine_target import (
    GATE_KEY_FILE,
    NoEngineError,
    gate_key,
    local_url,
    running_target,
)
from homelab.engine.supervision.state_file import StateFile
from homelab.errors import ExitCode


def test_the_gate_key_is_read_from_the_state_folder(tmp_path) -> None:
    assert gate_key(tmp_path) is None  # no file: the gate checks no key
    (tmp_path / GATE_KEY_FILE).write_text("  k-77\n")
    assert gate_key(tmp_path) == "k-77"
    (tmp_path / GATE_KEY_FILE).write_text("\n")
    assert gate_key(tmp_path) is None


def test_a_gate_on_every_address_is_reached_on_loopback() -> None:
    assert local_url("http://0.0.0.0:8080/") == "http://127.0.0.1:8080"
    assert local_url("http://[::]:8080") == "http://[::1]:8080"
    assert local_url("http://127.0.0.1:9000/") == "http://127.0.0.1:9000"


def test_no_live_record_is_the_no_engine_error(tmp_path) -> None:
    with pytest.raises(NoEngineError) as raised:
        running_target(StateFile(tmp_path / "engine.json"))
    assert raised.value.exit_code == ExitCode.ENGINE
    assert "homelab serve MODEL" in (raised.value.hint or "")
