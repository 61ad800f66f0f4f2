"""Crashes: restart with backoff, the crash loop, failures that repeat, and the policy's arithmetic.

The engines are real: SmolLM2 killed with SIGKILL; a GGUF of an architecture
llama.cpp does not know (``xyzzy``) and a truncated SmolLM2, both of which make
llama-server exit at once with its own error lines, which the failure quotes.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from homelab.engine.supervision.failure import EngineFailure
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.states import CrashHistory
from homelab.engine.supervision.supervisor import RestartPolicy, State
from homelab.errors import EngineError, ExitCode, ModelFileError, UnknownArchitectureError
from tests.factory.capture_fixtures import _unknown_arch_gguf

pytestmark = pytest.mark.engine


def _states(supervisor) -> list[State]:
    return [t.state for t in supervisor.events]


def test_sigkill_of_the_engine_restarts_it(supervise) -> None:
    supervisor = supervise()
    supervisor.start()
    first = supervisor.wait_ready(120)
    os.kill(first.pid, signal.SIGKILL)

    deadline_states = [State.CRASHED, State.RESTARTING, State.STARTING, State.READY]
    for _ in range(600):
        if _states(supervisor)[2:6] == deadline_states:
            break
        supervisor.wait_stopped(0.2)
    assert _states(supervisor)[:6] == [State.STARTING, State.READY, *deadline_states]
    crashed = supervisor.events[2]
    assert crashed.failure is not None and "killed by SIGKILL" in crashed.failure.message
    assert crashed.pid == first.pid
    second = supervisor.events[5]
    assert second.pid != first.pid and second.attempt == 2
    assert not alive(first.pid) and alive(second.pid)
    assert "restart in 0.1 s" in supervisor.events[3].reason
    record = StateFile().read()
    assert record is not None and record.pid == second.pid and record.ready_at is not None
    # the second attempt's lines are its own: they start after the attempt-2 marker
    assert any("listening on" in line for line in supervisor.attempt_lines())
    assert " attempt 2: " in supervisor.log_path.read_text()
    assert supervisor.failure is None  # ready again


def test_crash_loop_stops_and_quotes_the_engine(supervise, tmp_path: Path) -> None:
    model = _unknown_arch_gguf(tmp_path / "xyzzy.gguf")
    policy = RestartPolicy(
        max_crashes=3,
        window_s=600,
        backoff_first_s=0.05,
        backoff_max_s=0.2,
        give_up_on_permanent=False,
    )
    supervisor = supervise(model, policy=policy)
    supervisor.start()
    with pytest.raises(UnknownArchitectureError) as caught:
        supervisor.wait_ready(120)
    error = caught.value
    assert error.exit_code == ExitCode.BAD_MODEL
    assert "gave up after 3 crashes in 600 s (a crash loop)" in error.message
    assert (
        "llama_model_load: error loading model: unknown model architecture: 'xyzzy'"
        in error.message
    )
    assert "HOMELAB_LLAMA_SERVER" in error.hint
    states = _states(supervisor)
    assert states.count(State.CRASHED) == 3 and states.count(State.RESTARTING) == 2
    assert states[-1] is State.STOPPED and State.READY not in states
    pids = {t.pid for t in supervisor.events if t.state is State.CRASHED}
    assert len(pids) == 3 and not any(alive(pid) for pid in pids)
    assert StateFile().read() is None
    assert supervisor.events[-1].failure is not None
    assert supervisor.events[-1].failure.kind == "unknown_architecture"


def test_a_failure_that_repeats_is_not_restarted(
    supervise, smollm2_gguf: Path, tmp_path: Path
) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(smollm2_gguf.read_bytes()[:3_000_000])
    supervisor = supervise(truncated)  # the default policy: permanent failures end at once
    supervisor.start()
    with pytest.raises(ModelFileError) as caught:
        supervisor.wait_ready(120)
    assert caught.value.exit_code == ExitCode.BAD_MODEL
    assert "not restarting (it would fail the same way again)" in caught.value.message
    assert (
        "data is not within the file bounds, model is corrupted or incomplete"
        in caught.value.message
    )
    assert "truncated or damaged" in caught.value.hint
    assert _states(supervisor) == [State.STARTING, State.CRASHED, State.STOPPED]


def test_spawn_failure_is_an_error_not_a_state(supervise, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-llama-server"
    supervisor = supervise(argv=(str(missing), "-m", "x.gguf"))
    with pytest.raises(EngineError, match="does not exist") as caught:
        supervisor.start()
    assert caught.value.exit_code == ExitCode.ENGINE
    assert supervisor.state is State.STOPPED and supervisor.pid is None


# -- the policy's arithmetic (pure) ------------------------------------------------------


def _crash(**kw: object) -> EngineFailure:
    return EngineFailure("t", "m", None, **kw)  # type: ignore[arg-type]


def test_backoff_doubles_up_to_the_cap_and_the_window_forgets() -> None:
    policy = RestartPolicy(max_crashes=5, window_s=100, backoff_first_s=1, backoff_max_s=5)
    history = CrashHistory(policy)
    delays = [history.record(_crash(), t, port_pinned=False)[0] for t in (0, 1, 2, 3)]
    assert delays == [1, 2, 4, 5]
    delay, why = history.record(_crash(), 4, port_pinned=False)
    assert delay is None and "gave up after 5 crashes in 100 s" in why
    fresh = CrashHistory(policy)
    for t in (0, 1, 2, 3):
        fresh.record(_crash(), t, port_pinned=False)
    assert fresh.record(_crash(), 250, port_pinned=False) == (1, "")  # the old four left the window
    assert len(fresh) == 1


def test_permanent_gives_up_at_once_and_port_conflict_retries_at_once() -> None:
    history = CrashHistory(RestartPolicy())
    assert history.record(_crash(permanent=True), 0, port_pinned=False)[0] is None
    assert history.record(_crash(port_conflict=True), 1, port_pinned=False) == (0.0, "")
    assert history.record(_crash(port_conflict=True), 2, port_pinned=True)[
        0
    ] == RestartPolicy().delay(3)
    lenient = CrashHistory(RestartPolicy(give_up_on_permanent=False))
    assert lenient.record(_crash(permanent=True), 0, port_pinned=False)[0] == 1.0
