"""The serve session (the domain under ``homelab serve`` and the TUI): its events on a real
start and stop, subscribers that cannot block it, the plan's facts in the record, and the
engine kinds registry. Real llama-server, real SmolLM2, a synthetic 8 GiB card."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from homelab.engine.kinds import KINDS, engine_kind
from homelab.engine.options import plan_options
from homelab.engine.supervision.facts import Asked, PlanFacts
from homelab.engine.supervision.identity import ENGINE_VAR, find_engines
from homelab.engine.supervision.ownership import Running, decide
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import StateFile
from homelab.errors import EngineError, ModelFileError, UsageError
from homelab.serve import events as ev
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession

pytestmark = pytest.mark.engine
OPTIONS = plan_options(vram=8 << 30, ctx=512, slots=1)


def _names(events: list) -> list[str]:
    out = []
    for event in events:
        name = type(event).__name__
        if isinstance(event, ev.EngineChanged):
            name += f"({event.transition.state.value})"
        out.append(name)
    return out


def test_events_of_a_real_start_and_stop(smollm2_gguf: Path, engines) -> None:
    session = ServeSession(ServeRequest(str(smollm2_gguf), OPTIONS))
    seen: list = []
    session.subscribe(seen.append)
    gate = threading.Event()
    stuck: list = []
    session.subscribe(lambda e: (gate.wait(), stuck.append(e)))  # a subscriber that blocks
    try:
        session.start()
        engines.track(session.supervisor.pid)
        session.wait_ready()  # gets there although one subscriber handled nothing yet
        assert stuck == []
        record = StateFile().read()
        pid = session.supervisor.pid
        session.stop()
    finally:
        gate.set()
        session.close()
    assert _names(seen) == [
        "Planned",
        "Starting",
        "EngineChanged(starting)",
        "Started",
        "EngineChanged(ready)",
        "Ready",
        "Actuals",
        "EngineChanged(stopping)",
        "EngineChanged(stopped)",
        "Stopped",
    ]
    assert _names(stuck) == _names(seen)  # the slow one gets every event too, in order
    planned, ready = seen[0], seen[5]
    assert planned.plan.kind == "llama.cpp" and "-c" in planned.argv
    assert ready.url == f"http://127.0.0.1:{record.port}" and ready.program == "llama-server"
    assert [r.name for r in seen[6].measured.rows][:2] == ["weights", "KV"]
    assert seen[-1].how == "stopped" and not alive(pid)

    # the record carries the plan's facts, written at start (not parsed from argv)
    assert record.engine == "llama.cpp" and record.facts == planned.plan.facts
    assert record.facts == PlanFacts(
        slots=1,
        ctx_total=512,
        ctx_per_slot=512,
        kv_tokens=512,
        unified=False,
        cache_type_k="q8_0",
        cache_type_v="q8_0",
    )
    assert record.port_pinned is False and record.engine_id
    assert StateFile().read() is None


def test_run_on_a_worker_thread_until_stopped(smollm2_gguf: Path, engines) -> None:
    """How the TUI drives it: run() on a worker, stop() from the UI thread."""
    session = ServeSession(ServeRequest(str(smollm2_gguf), OPTIONS))
    ready = threading.Event()
    session.subscribe(lambda e: ready.set() if isinstance(e, ev.Ready) else None)
    errors: list = []

    def work() -> None:
        try:
            session.run()
        except Exception as error:  # a failure would be asserted on below
            errors.append(error)

    worker = threading.Thread(target=work)
    worker.start()
    assert ready.wait(120), _names(session.events)
    engines.track(session.supervisor.pid)
    session.stop()
    worker.join(60)
    session.close()
    assert not worker.is_alive() and errors == []
    assert _names(session.events)[-1] == "Stopped" and session.events[-1].how == "stopped"
    assert not alive(session.supervisor.pid)


def test_a_handed_prepared_is_started_as_is(smollm2_gguf: Path, engines, monkeypatch) -> None:
    """The TUI hands the preview it shows: the session starts it and never plans again."""
    from homelab.serve.prepare import prepare

    kind = type(engine_kind("llama.cpp"))
    planned: list[str] = []
    plan = kind.plan

    def counted(self, model, *args, **kwargs):
        planned.append(model)
        return plan(self, model, *args, **kwargs)

    monkeypatch.setattr(kind, "plan", counted)
    prepared = prepare(str(smollm2_gguf), None, OPTIONS)
    assert planned == [str(smollm2_gguf)]
    session = ServeSession(ServeRequest(str(smollm2_gguf), OPTIONS, prepared=prepared))
    try:
        session.start()
        engines.track(session.supervisor.pid)
        session.wait_ready()
        session.stop()
    finally:
        session.close()
    assert planned == [str(smollm2_gguf)]  # the preview's pass only
    first = session.events[0]
    assert isinstance(first, ev.Planned) and first.plan is prepared.plan
    assert session.plan is None or session.plan is prepared.plan


def test_a_failed_start_is_a_failed_event_and_the_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    session = ServeSession(ServeRequest(str(bad), OPTIONS))
    seen: list = []
    session.subscribe(seen.append)
    with pytest.raises(ModelFileError) as caught:
        session.start()
    session.close()
    assert caught.value.exit_code == 4  # a bad model file
    assert isinstance(seen[-1], ev.Failed) and seen[-1].error is caught.value


def test_the_marker_finds_the_engine_and_a_pinned_port_is_recorded(
    smollm2_gguf: Path, engines
) -> None:
    from tests.factory.server_log import free_port

    port = free_port()
    options = plan_options(vram=8 << 30, ctx=512, slots=1, port=port)
    session = ServeSession(ServeRequest(str(smollm2_gguf), options, detach=True))
    try:
        session.start()
        engines.track(session.supervisor.pid)
        session.wait_ready()
    finally:
        session.close()
    record = StateFile().read()
    assert record.port == port and record.port_pinned
    (found,) = find_engines(StateFile().path)
    assert found.pid == record.pid and found.engine_id == record.engine_id
    import psutil

    assert psutil.Process(record.pid).environ()[ENGINE_VAR] == record.engine_id
    assert _names(session.events)[-2:] == ["LeftRunning", "Stopped"]

    # the same model, another pinned port: refused, never silently the running one's port
    again = ServeSession(ServeRequest(str(smollm2_gguf), plan_options(vram=8 << 30, port=port + 1)))
    with pytest.raises(EngineError, match=f"port {port}; you asked port {port + 1}") as caught:
        again.start()
    again.close()
    assert "`replace`" in caught.value.hint
    # the same settings adopt it
    same = ServeSession(ServeRequest(str(smollm2_gguf), options, detach=True))
    try:
        same.start()
        same.wait_ready()
    finally:
        same.close()
    assert _names(same.events)[0] == "Adopting" and same.supervisor.pid == record.pid
    from homelab.engine.supervision.ownership import stop_engine

    assert stop_engine(StateFile(), StateFile().read()) and not alive(record.pid)


# -- adoption decisions (pure) ------------------------------------------------------------


def _running(tmp_path: Path, **facts: object) -> Running:
    import os

    from homelab.engine.supervision.process import create_time_of

    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    values = {
        "slots": 2,
        "ctx_total": 8192,
        "ctx_per_slot": 4096,
        "kv_tokens": 8192,
        "unified": False,
        "cache_type_k": "q8_0",
        "cache_type_v": "q8_0",
        **facts,
    }
    record = EngineRecord(
        engine="llama.cpp",
        pid=os.getpid(),
        pgid=os.getpgrp(),
        create_time=create_time_of(os.getpid()),
        argv=("llama-server",),
        host="127.0.0.1",
        port=8080,
        model=str(model),
        log_path="/x.log",
        started_at=0.0,
        detached=True,
        facts=PlanFacts(**values),  # type: ignore[arg-type]
    )
    return Running(record)


def test_adoption_refuses_other_settings_and_names_them(tmp_path: Path) -> None:
    now = _running(tmp_path)
    model = now.record.model
    with pytest.raises(EngineError) as caught:
        decide(now, model, asked=Asked(ctx=4096, slots=1), replace=False)
    assert "runs with context 8192 × 2 slots; you asked 4096 × 1" in caught.value.message
    assert caught.value.title == "Engine runs with other settings"
    with pytest.raises(EngineError, match="V cache q8_0; you asked V cache f16"):
        decide(now, model, asked=Asked(cache_type_v="f16"), replace=False)
    with pytest.raises(EngineError, match="unified KV False; you asked unified KV True"):
        decide(now, model, asked=Asked(unified=True), replace=False)
    with pytest.raises(EngineError, match="engine llama.cpp; you asked engine vllm"):
        decide(now, model, asked=Asked(engine="vllm"), replace=False)
    assert decide(now, model, asked=Asked(ctx=4096, slots=1), replace=True) == "replace"
    # what was not asked for is the plan's to decide: the running engine is fine
    assert decide(now, model, asked=Asked(engine="llama.cpp"), replace=False) == "adopt"
    # llama.cpp pads the context: 8000 asked over 2 slots is the 8192 that runs
    assert decide(now, model, asked=Asked(ctx=8000, slots=2), replace=False) == "adopt"
    assert decide(Running(None), model, replace=False) == "start"


def test_the_kinds_registry_has_one_name_per_engine() -> None:
    assert set(KINDS) == {"llama.cpp", "vllm"}
    assert engine_kind("llama.cpp").program == "llama-server"
    assert (
        engine_kind("llama.cpp").default_port == 8080 and engine_kind("vllm").default_port == 8000
    )
    with pytest.raises(UsageError, match="Unknown engine 'ollama'"):
        engine_kind("ollama")
