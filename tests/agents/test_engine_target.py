"""Reading the engine's target: the gate's key file, and a gate bound to every address."""

from __future__ import annotations

import pytest

from homelab.agents.engine_target import NoEngineError, local_url, running_target
from homelab.engine.supervision.state_file import StateFile
from homelab.errors import ExitCode, UsageError
from homelab.gate.key_file import KEY_NAME, stored_key


def test_the_gate_key_has_one_reader_and_it_wants_a_private_file(tmp_path) -> None:
    path = tmp_path / KEY_NAME
    assert stored_key(path) is None  # no file: the gate checks no key
    path.write_text("  k-77\n")
    path.chmod(0o600)
    assert stored_key(path) == "k-77"
    path.chmod(0o644)
    with pytest.raises(UsageError, match="may be read by others") as raised:
        stored_key(path)
    assert f"chmod 600 {path}" in (raised.value.hint or "")
    path.write_text("\n")
    path.chmod(0o600)
    with pytest.raises(UsageError, match="does not hold one key"):
        stored_key(path)


def test_a_gate_on_every_address_is_reached_on_loopback() -> None:
    assert local_url("http://0.0.0.0:8080/") == "http://127.0.0.1:8080"
    assert local_url("http://[::]:8080") == "http://[::1]:8080"
    assert local_url("http://127.0.0.1:9000/") == "http://127.0.0.1:9000"


def test_no_live_record_is_the_no_engine_error(tmp_path) -> None:
    with pytest.raises(NoEngineError) as raised:
        running_target(StateFile(tmp_path / "engine.json"))
    assert raised.value.exit_code == ExitCode.ENGINE
    assert "homelab serve MODEL" in (raised.value.hint or "")
