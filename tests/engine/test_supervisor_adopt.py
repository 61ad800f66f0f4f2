"""One engine at a time: adopt a detached engine, replace it, refuse a second, clean stale records,
and read a stop from outside as a stop, not a crash. Real llama-server (SmolLM2)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from homelab.engine.supervision.ownership import Running, decide, stop_engine
from homelab.engine.supervision.process import alive, create_time_of
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.supervisor import State
from homelab.errors import EngineError

pytestmark = pytest.mark.engine


def _detached_and_released(supervise) -> EngineRecord:
    first = supervise(detached=True)
    first.start()
    first.wait_ready(120)
    first.release()
    assert first.released and alive(first.pid)
    record = StateFile().live()
    assert record is not None and record.pid == first.pid
    assert record.detached and record.supervisor_pid is None and record.ready_at is not None
    return record


def test_next_start_adopts_the_detached_engine(supervise, engines) -> None:
    record = _detached_and_released(supervise)
    assert decide(Running(record), record.model, replace=False) == "adopt"

    second = supervise(detached=True)
    second.adopt(record)
    ready = second.wait_ready(60)
    assert ready.pid == record.pid  # no second engine
    assert [t.state for t in second.events] == [State.STARTING, State.READY]
    assert second.events[0].reason == f"adopted llama-server pid {record.pid}"
    assert StateFile().read().supervisor_pid == os.getpid()
    assert any("listening on" in line for line in second.attempt_lines())  # its log, read back

    # an adopted engine is supervised like our own: a crash is restarted (detached again)
    os.kill(record.pid, signal.SIGKILL)
    for _ in range(600):
        if [t.state for t in second.events][-1:] == [State.READY] and second.pid != record.pid:
            break
        second.wait_stopped(0.2)
    engines.track(second.pid)
    assert second.pid != record.pid and second.state is State.READY
    assert [t.state for t in second.events][2:4] == [State.CRASHED, State.RESTARTING]
    assert second.events[2].failure.returncode is None  # not our child: its exit code is unknown
    assert os.getsid(second.pid) == second.pid  # detached again: its own session
    assert StateFile().read().pid == second.pid

    second.stop()
    assert not alive(second.pid) and StateFile().read() is None


def test_replace_stops_the_running_engine(supervise) -> None:
    record = _detached_and_released(supervise)
    assert decide(Running(record), "/some/other/model.gguf", replace=True) == "replace"
    assert stop_engine(StateFile(), record) is True
    assert not alive(record.pid, record.create_time) and StateFile().read() is None
    fresh = supervise()
    fresh.start()
    assert fresh.wait_ready(120).pid != record.pid


def test_refuses_another_model_or_another_supervisor(supervise, tmp_path: Path) -> None:
    record = _detached_and_released(supervise)
    with pytest.raises(EngineError, match="already serves another model") as caught:
        decide(Running(record), str(tmp_path / "other.gguf"), replace=False)
    assert "`replace`" in caught.value.hint and record.url in caught.value.message
    assert "--" not in caught.value.hint  # the setting, not a flag
    # the same model through another path spelling is the same model
    link = tmp_path / "same.gguf"
    link.symlink_to(record.model)
    assert decide(Running(record), str(link), replace=False) == "adopt"

    other = subprocess.Popen(["sleep", "60"])
    try:
        watched = dataclasses.replace(
            record, supervisor_pid=other.pid, supervisor_create_time=create_time_of(other.pid)
        )
        with pytest.raises(EngineError, match=f"supervised by homelab pid {other.pid}"):
            decide(Running(watched), record.model, replace=False)
    finally:
        other.kill()
        other.wait()
    stop_engine(StateFile(), record)


def test_stale_records_are_removed_unreadable_ones_set_aside() -> None:
    store = StateFile()
    dead = subprocess.Popen(["true"])
    dead.wait()
    record = EngineRecord(
        engine="llama.cpp",
        pid=dead.pid,
        pgid=dead.pid,
        create_time=time.time() - 5,
        argv=("llama-server",),
        host="127.0.0.1",
        port=8080,
        model="/m.gguf",
        log_path="/nonexistent.log",
        started_at=time.time(),
        detached=True,
        supervisor_pid=dead.pid,
        supervisor_create_time=time.time() - 5,
    )
    store.write(record)
    assert store.read() == record  # written and read back whole
    assert store.live() is None and not store.path.exists()
    store.path.write_text("{ not json")
    assert store.read() is None and store.path.exists()  # reading alone touches nothing
    notes = []
    assert store.live(notes) is None and not store.path.exists()
    (aside,) = notes
    assert aside.moved_to.read_text() == "{ not json"  # set aside whole, never deleted
    assert aside.moved_to.name.startswith("engine.json.unreadable-")


def test_homelab_stop_from_outside_is_a_stop_not_a_crash(supervise) -> None:
    supervisor = supervise()  # attached, recorded in the state file
    supervisor.start()
    pid = supervisor.wait_ready(120).pid
    assert stop_engine(StateFile(), StateFile().live()) is True
    assert supervisor.wait_stopped(30)
    states = [t.state for t in supervisor.events]
    assert State.CRASHED not in states and states[-1] is State.STOPPED
    assert supervisor.events[-1].reason == "stopped from outside (a stop or a replace)"
    assert supervisor.failure is None and not alive(pid)
