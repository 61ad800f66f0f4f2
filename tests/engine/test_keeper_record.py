"""The keeper's part of the engine record, hostile cases: a keeper pid that another program
has now (pid reuse) is neither "running" nor signalled; a record or a keeper's note torn by
a keeper that died mid-write is set aside or ignored, never a traceback; restarts round-trip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from homelab.engine.supervision.ownership import stop_keeper
from homelab.engine.supervision.process import alive, create_time_of
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.restarts import (
    KEPT,
    KeeperEnd,
    Restart,
    end_path,
    read_end,
    with_restart,
    write_end,
)
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import run_homelab


def _record(**changes: object) -> EngineRecord:
    values: dict[str, object] = {
        "engine": "llama.cpp",
        "pid": 999_999,
        "pgid": 999_999,
        "create_time": 1.0,
        "argv": ("llama-server",),
        "host": "127.0.0.1",
        "port": 18_080,
        "model": "/models/m.gguf",
        "log_path": "/tmp/none.log",
        "started_at": time.time(),
        "detached": True,
        "kept": True,
    }
    values.update(changes)
    return EngineRecord(**values)  # type: ignore[arg-type]


@pytest.fixture
def other_program():
    """A live process that is not a keeper (what a recycled pid points at)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_reused_keeper_pid_is_not_a_keeper_and_is_never_signalled(other_program) -> None:
    started = create_time_of(other_program.pid)
    assert started is not None
    record = _record(supervisor_pid=other_program.pid, supervisor_create_time=started - 50.0)
    assert not record.keeper_alive() and not record.supervisor_alive()
    assert stop_keeper(record, grace_s=1.0) is False
    time.sleep(0.2)
    assert other_program.poll() is None and alive(other_program.pid, started)
    # the record is stale (neither engine nor keeper runs): status says nothing runs
    StateFile().write(record)
    result = run_homelab("status", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["running"] is False
    assert other_program.poll() is None


def test_the_live_keeper_is_one_and_a_record_not_kept_names_none(other_program) -> None:
    started = create_time_of(other_program.pid)
    kept = _record(supervisor_pid=other_program.pid, supervisor_create_time=started)
    assert kept.keeper_alive()
    assert not _record(supervisor_pid=other_program.pid, kept=False).keeper_alive()
    assert stop_keeper(_record(supervisor_pid=os.getpid(), supervisor_create_time=1.0)) is False


def test_restarts_round_trip_and_keep_the_latest() -> None:
    restarts: tuple[Restart, ...] = ()
    for n in range(KEPT + 3):
        restarts = with_restart(restarts, Restart("engine", float(n), "crashed", -9))
    assert len(restarts) == KEPT and restarts[0].at == 3.0
    record = _record(restarts=(*restarts[:-1], Restart("gate", 1.0, "the gate died", None)))
    again = EngineRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again.restarts == record.restarts and again.kept
    assert again.restarts[-1].returncode is None  # unknown stays null, never 0
    assert restarts[0].describe() == "engine: crashed (killed by SIGKILL)"


@pytest.mark.parametrize(
    "restarts",
    [
        [{"what": "engine"}],
        [{"what": "disk", "at": 1, "why": "x"}],
        "lots",
        [{"what": "gate", "at": True, "why": "x"}],
    ],
)
def test_a_record_with_garbled_restarts_is_set_aside(restarts: object) -> None:
    data = _record().to_json()
    data["restarts"] = restarts
    store = StateFile()
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(json.dumps(data))
    result = run_homelab("status")
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "could not be read" in result.stderr and not store.path.exists()


def test_a_record_torn_mid_write_is_set_aside_not_a_traceback() -> None:
    store = StateFile()
    whole = json.dumps(_record(restarts=(Restart("engine", 1.0, "crashed", 1),)).to_json())
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(whole[: len(whole) // 2])  # the keeper died while writing
    for words in (("status",), ("status", "--json"), ("stop",)):
        result = run_homelab(*words)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
    assert list(store.path.parent.glob("engine.json.unreadable-*"))


def test_a_keeper_note_torn_mid_write_is_no_note() -> None:
    note = KeeperEnd(
        "/models/m.gguf", 5.0, "Crash loop: gave up", (Restart("engine", 4.0, "x", 1),)
    )
    write_end(note)
    assert read_end() == note
    status = json.loads(run_homelab("status", "--json").stdout)
    assert status["keeper_end"]["why"] == "Crash loop: gave up"
    text = end_path().read_text()
    end_path().write_text(text[: len(text) // 2])
    assert read_end() is None
    result = run_homelab("status", "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == {"running": False}
