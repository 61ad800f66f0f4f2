"""The state file under hostile input: never a traceback, never a hang, never a silent delete,
and never a signal to a process that is not the recorded engine.

Each case was found by an adversarial probe (valid JSON that is not an object, a directory
or a FIFO in the file's place, fields of the wrong type). The commands run as a person
runs them (``python -m homelab``); no engine is needed for these.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.ownership import stop_engine
from homelab.engine.supervision.process import alive, create_time_of
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import run_homelab

FACTS = PlanFacts(
    slots=1,
    ctx_total=512,
    ctx_per_slot=512,
    kv_tokens=512,
    unified=False,
    cache_type_k="q8_0",
    cache_type_v="q8_0",
)


def _record(pid: int, **changes: object) -> EngineRecord:
    values: dict[str, object] = {
        "engine": "llama.cpp",
        "pid": pid,
        "pgid": pid,
        "create_time": create_time_of(pid),
        "argv": ("llama-server", "-m", "/m.gguf"),
        "host": "127.0.0.1",
        "port": 18080,
        "model": "/m.gguf",
        "log_path": "/nonexistent.log",
        "started_at": time.time(),
        "detached": True,
        "facts": FACTS,
    }
    values.update(changes)
    return EngineRecord(**values)  # type: ignore[arg-type]


def _valid_json() -> dict[str, object]:
    return _record(os.getpid()).to_json()


def _aside(store: StateFile) -> list[Path]:
    return sorted(store.path.parent.glob("engine.json.unreadable-*"))


def _commands_survive(store: StateFile) -> None:
    """status, status --json and stop: exit 0, no traceback, and they say it was set aside."""
    for args in (["status"], ["status", "--json"], ["stop"]):
        result = run_homelab(*args, timeout_s=60)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not store.path.exists() or store.path.is_file()


CONTENTS = {
    "null": "null",
    "a list": "[1, 2]",
    "a string": '"engine"',
    "a number": "12",
    "not json": "{ not json",
    "not utf-8": b"\xff\xfe{}",
    "pid a string": {"pid": "123"},
    "pid a boolean": {"pid": True},
    "port out of range": {"port": 70000},
    "argv not strings": {"argv": [1, 2]},
    "argv a string": {"argv": "llama-server -m x"},
    "no model": {"model": None},
    "detached a number": {"detached": 1},
    "facts wrong type": {"facts": {"slots": "2"}},
    "facts a list": {"facts": [1]},
    "a foreign host": {"host": "203.0.113.9"},
    "unknown version": {"version": 99},
    "negative pid": {"pid": -1},
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "api_key a number": {"api_key": 12345678901234567890},
    "api_key with spaces": {"api_key": "a key with spaces in it"},
    "api_key too short": {"api_key": "short"},
    "api_key a list of keys": {"api_key": "abcdefghijklmnop,qrstuvwxyz012345"},
}


@pytest.mark.parametrize("case", list(CONTENTS))
def test_a_record_that_is_not_one_is_set_aside_not_deleted(case: str) -> None:
    store = StateFile()
    content = CONTENTS[case]
    if isinstance(content, dict):
        content = json.dumps({**_valid_json(), **content})
    store.path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        store.path.write_bytes(content)
    else:
        store.path.write_text(content)
    original = store.path.read_bytes()

    assert store.read() is None and store.path.exists()  # reading alone moves nothing
    notes: list = []
    assert store.live(notes) is None
    (aside,) = notes
    assert not store.path.exists() and aside.moved_to.read_bytes() == original
    assert "set aside as engine.json.unreadable-" in aside.describe()

    store.path.write_bytes(original)  # and the commands, as a person runs them
    status = run_homelab("status", timeout_s=60)
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    assert "could not be read" in status.stderr and "set aside as" in status.stderr
    assert "no homelab engine is running" in status.stdout
    store.path.write_bytes(original)
    stop = run_homelab("stop", timeout_s=60)
    assert stop.returncode == 0 and "Traceback" not in stop.stderr, stop.stderr
    assert "no homelab engine is running" in stop.stdout
    assert len(_aside(store)) == 3  # one per look: each kept, none deleted


def test_a_directory_in_its_place_is_set_aside() -> None:
    store = StateFile()
    store.path.mkdir(parents=True)
    (store.path / "keep").write_text("x")
    result = run_homelab("status", "--json", timeout_s=60)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert json.loads(result.stdout)["running"] is False
    assert "it is a directory" in result.stderr
    (aside,) = _aside(store)
    assert (aside / "keep").read_text() == "x"  # moved whole, nothing deleted
    store.path.mkdir()
    _commands_survive(store)


def test_a_fifo_in_its_place_does_not_hang() -> None:
    store = StateFile()
    store.path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(store.path)
    for args in (["status"], ["stop"]):
        result = run_homelab(*args, timeout_s=30)  # a read would block for ever
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert "it is a FIFO" in result.stderr
        if not store.path.exists():
            os.mkfifo(store.path)
    assert len(_aside(store)) == 2


def test_serve_with_an_unreadable_record_and_nothing_running_starts_fresh(tmp_path) -> None:
    """Setting a bad record aside does not block a serve when no engine is found."""
    store = StateFile()
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text("[]")
    not_a_model = tmp_path / "not-a-model.gguf"  # a regular file: only the plan refuses it
    not_a_model.write_bytes(b"not a GGUF header")
    result = run_homelab("serve", str(not_a_model), "--vram", "8GiB", timeout_s=60)
    assert "Traceback" not in result.stderr
    assert "could not be read" in result.stdout
    assert result.returncode == 4 and "Bad model file" in result.stderr  # got to the plan
    assert len(_aside(store)) == 1


def test_the_record_is_written_atomically_and_read_back_whole() -> None:
    store = StateFile()
    record = _record(os.getpid(), engine_id="abc", port_pinned=True)
    store.write(record)
    assert store.read() == record
    assert [p.name for p in store.path.parent.iterdir() if p.name.startswith(".")] == []
    legacy = {**record.to_json(), "engine": "llama-server"}  # records from before one name
    del legacy["facts"], legacy["engine_id"], legacy["port_pinned"]
    store.path.write_text(json.dumps(legacy))
    old = store.read()
    assert old is not None and old.engine == "llama.cpp" and old.facts is None


def test_status_talks_only_to_loopback_whatever_the_record_says() -> None:
    """A record naming another host is not a record; a record's URL is always loopback."""
    record = _record(os.getpid())
    assert record.url == "http://127.0.0.1:18080"
    data = {**record.to_json(), "host": "203.0.113.9"}
    with pytest.raises(ValueError, match="not the loopback address"):
        EngineRecord.from_json(data)


# -- pid verification: never signal a process that is not the recorded engine ----------


@pytest.fixture
def bystander():
    """An unrelated process in a session of its own (as an engine would be)."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def test_a_reused_pid_is_not_signalled(bystander) -> None:
    store = StateFile()
    # the recorded engine started at another time: its pid now belongs to `sleep`
    store.write(_record(bystander.pid, create_time=create_time_of(bystander.pid) - 30))
    record = store.read()
    assert record is not None and not record.engine_alive()
    assert stop_engine(store, record, grace_s=1) is False
    assert alive(bystander.pid) and bystander.poll() is None
    assert store.live() is None  # and the stale record is gone (it was readable)


def test_a_pid_without_start_time_or_marker_is_not_signalled(bystander) -> None:
    store = StateFile()
    store.write(_record(bystander.pid, create_time=None, engine_id=None))
    record = store.read()
    assert "neither its start time nor its marker" in (record.not_the_engine() or "")
    assert stop_engine(store, record, grace_s=1) is False
    assert bystander.poll() is None


def test_a_pid_whose_marker_differs_is_not_signalled(bystander) -> None:
    store = StateFile()
    store.write(_record(bystander.pid, engine_id="not-its-marker"))
    record = store.read()
    assert "marker" in (record.not_the_engine() or "")
    assert stop_engine(store, record, grace_s=1) is False
    assert bystander.poll() is None


def test_a_recorded_group_that_is_not_its_group_is_not_signalled(bystander) -> None:
    """pgid pointing at homelab's own group would kill the caller: never signalled."""
    store = StateFile()
    store.write(_record(bystander.pid, pgid=os.getpgrp()))
    record = store.read()
    assert "process group" in (record.not_the_engine() or "")
    assert stop_engine(store, record, grace_s=1) is False
    assert bystander.poll() is None and alive(os.getpid())
    result = run_homelab("stop", timeout_s=60)
    assert result.returncode == 0 and bystander.poll() is None


def test_the_engine_key_is_kept_private() -> None:
    """The record holds the engine's own key: the file is 0600 whatever the umask, the key is
    in no repr, and a garbled key is never echoed when the record is set aside."""
    store = StateFile()
    key = "k" * 43
    old = os.umask(0)
    try:
        store.write(_record(os.getpid(), api_key=key))
    finally:
        os.umask(old)
    assert store.path.stat().st_mode & 0o777 == 0o600
    record = store.read()
    assert record is not None and record.api_key == key
    assert key not in repr(record)
    secret = "garbled key " + "s3cr3t" * 4
    store.path.write_text(json.dumps({**_valid_json(), "api_key": secret}))
    notes: list = []
    assert store.live(notes) is None
    (aside,) = notes
    assert "api_key" in aside.describe() and "s3cr3t" not in aside.describe()
