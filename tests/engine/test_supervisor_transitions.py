"""The supervisor's transition table: the bare state machine takes exactly what the table allows,
and the run loop's real sequences stay inside it.

The sequences run a real :class:`Supervisor` on a fake engine (a Python HTTP server that
prints a serving line and answers ``/health``; ``--crash`` makes it exit at once, ``--mute``
makes it never serve), so every path of the run loop is taken in seconds: start and stop,
crash and restart with backoff, a crash loop, an asked-for restart, a heal's new spec on a
crash, a stop during the backoff, a stop from outside, a start that times out, a spawn
that fails, and adoption.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
import textwrap
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from homelab.engine.supervision import states
from homelab.engine.supervision.failure import unexplained
from homelab.engine.supervision.ownership import stop_engine
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.readiness import EngineProfile
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.states import (
    TRANSITIONS,
    EngineSpec,
    RestartPolicy,
    State,
    StateMachine,
    TransitionError,
)
from homelab.engine.supervision.supervisor import Supervisor
from homelab.errors import EngineError
from tests.factory.server_log import free_port

ALLOWED = [(before, after) for before in State for after in sorted(TRANSITIONS[before])]
REFUSED = [
    (before, after) for before in State for after in State if after not in TRANSITIONS[before]
]


def _path_to(target: State) -> list[State]:
    """The shortest run of states from STOPPED (the machine's first state) to ``target``."""
    paths = {State.STOPPED: [State.STOPPED]}
    queue = deque([State.STOPPED])
    while queue:
        state = queue.popleft()
        for nxt in sorted(TRANSITIONS[state]):
            if nxt not in paths:
                paths[nxt] = [*paths[state], nxt]
                queue.append(nxt)
    return paths[target]


def _machine_at(state: State) -> StateMachine:
    machine = StateMachine()
    for step in _path_to(state)[1:]:
        machine.move(step, "on the way", attempt=1, pid=None, url=None)
    assert machine.state is state
    return machine


def test_the_table_names_every_state_and_each_can_reach_stopped() -> None:
    assert set(TRANSITIONS) == set(State)
    for state in State:
        assert _path_to(state)[0] is State.STOPPED  # reachable from the start
        seen, todo = {state}, [state]
        while todo:
            for nxt in TRANSITIONS[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        assert State.STOPPED in seen, f"{state} cannot end"
    assert REFUSED  # the table is a restriction, not every pair


@pytest.mark.parametrize(("before", "after"), ALLOWED)
def test_every_allowed_transition_is_taken(before: State, after: State) -> None:
    machine = _machine_at(before)
    heard: list[states.Transition] = []
    machine.subscribe(heard.append)
    transition = machine.move(after, "allowed", attempt=2, pid=7, url=None)
    assert machine.state is after
    assert (transition.previous, transition.state) == (before, after)
    assert machine.events[-1] == transition and heard == [transition]


@pytest.mark.parametrize(("before", "after"), REFUSED)
def test_every_other_transition_is_refused(before: State, after: State) -> None:
    machine = _machine_at(before)
    events = machine.events
    heard: list[states.Transition] = []
    machine.subscribe(heard.append)
    with pytest.raises(TransitionError, match=f"no transition from {before} to {after}"):
        machine.move(after, "refused", attempt=2, pid=7, url=None)
    assert machine.state is before and machine.events == events and heard == []


# -- the run loop's sequences on a fake engine ---------------------------------------------

FAKE_ENGINE = textwrap.dedent(
    """
    import http.server, sys, time
    if "--crash" in sys.argv:
        print("fake: cannot load", flush=True)
        sys.exit(1)
    if "--mute" in sys.argv:
        time.sleep(600)
    port = int(sys.argv[sys.argv.index("--port") + 1])

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Health)
    print("fake engine serving", flush=True)
    server.serve_forever()
    """
)
FAST = RestartPolicy(max_crashes=3, window_s=600, backoff_first_s=0.05, backoff_max_s=0.1)
PROFILE = EngineProfile(
    name="fake-engine",
    serving_line=re.compile(r"fake engine serving"),
    diagnose=lambda lines, returncode: unexplained("fake-engine", returncode, lines),
)


def _argv(*flags: str) -> tuple[str, ...]:
    return (sys.executable, "-c", FAKE_ENGINE, *flags)


@pytest.fixture
def fake() -> Iterator[Callable[..., Supervisor]]:
    """``fake(*flags, policy=FAST, **spec)``: a supervisor of the fake engine; stopped after."""
    made: list[Supervisor] = []

    def make(*flags: str, policy: RestartPolicy = FAST, **spec: object) -> Supervisor:
        spec.setdefault("port", free_port())
        spec.setdefault("start_timeout_s", 60.0)
        supervisor = Supervisor(
            EngineSpec(argv=_argv(*flags), model="fake.gguf", **spec),  # type: ignore[arg-type]
            PROFILE,
            policy=policy,
            state_file=StateFile(),
        )
        made.append(supervisor)
        return supervisor

    yield make
    for supervisor in made:
        if supervisor.pid is not None and not supervisor.released:
            supervisor.stop()
        if supervisor.pid is not None and alive(supervisor.pid):
            os.kill(supervisor.pid, signal.SIGKILL)


def _words(supervisor: Supervisor) -> str:
    return " ".join(t.state for t in supervisor.events)


def _states(supervisor: Supervisor) -> str:
    """The states it went through, in words; each change one the table allows, none the loop's
    own failure."""
    events = supervisor.events
    assert all(t.state in TRANSITIONS[t.previous] for t in events)
    assert not any(t.failure and t.failure.title == "Supervisor failed" for t in events)
    return _words(supervisor)


def _wait_for(supervisor: Supervisor, tail: str) -> None:
    for _ in range(300):
        if _words(supervisor).endswith(tail):
            return
        supervisor.wait_stopped(0.1)
    raise AssertionError(f"never reached {tail}: {_words(supervisor)}")


def test_start_ready_stop(fake) -> None:
    supervisor = fake()
    supervisor.start()
    supervisor.wait_ready(30)
    supervisor.stop()
    assert _states(supervisor) == "starting ready stopping stopped"


def test_crash_restarts_with_backoff(fake) -> None:
    supervisor = fake()
    supervisor.start()
    first = supervisor.wait_ready(30)
    os.kill(first.pid, signal.SIGKILL)
    _wait_for(supervisor, "crashed restarting starting ready")
    assert "restart in 0.1 s" in supervisor.events[3].reason
    supervisor.stop()
    assert (
        _states(supervisor) == "starting ready crashed restarting starting ready stopping stopped"
    )


def test_a_crash_loop_gives_up(fake) -> None:
    supervisor = fake("--crash")
    supervisor.start()
    with pytest.raises(EngineError, match="gave up after 3 crashes"):
        supervisor.wait_ready(30)
    assert (
        _states(supervisor)
        == "starting crashed restarting starting crashed restarting starting crashed stopped"
    )


def test_an_asked_for_restart_is_no_crash(fake) -> None:
    supervisor = fake()
    supervisor.start()
    first = supervisor.wait_ready(30)
    supervisor.respec(dataclasses.replace(supervisor.spec), restart=True)
    supervisor.wait_ready(30, after=first.attempt)
    supervisor.stop()
    assert _states(supervisor) == "starting ready restarting starting ready stopping stopped"


def test_a_new_spec_on_a_crash_restarts_at_once(fake) -> None:
    supervisor = fake("--crash")
    healed = dataclasses.replace(supervisor.spec, argv=_argv())

    def heal(transition: states.Transition) -> None:
        if transition.state is State.CRASHED:
            supervisor.respec(healed)

    supervisor.subscribe(heal)
    supervisor.start()
    supervisor.wait_ready(30)
    assert supervisor.events[2].reason == "restarting on the new plan"
    supervisor.stop()
    assert _states(supervisor) == "starting crashed restarting starting ready stopping stopped"


def test_a_stop_during_the_backoff(fake) -> None:
    slow = dataclasses.replace(FAST, backoff_first_s=60.0, backoff_max_s=60.0)
    supervisor = fake("--crash", policy=slow)
    supervisor.start()
    _wait_for(supervisor, "crashed restarting")
    supervisor.stop()
    assert _states(supervisor) == "starting crashed restarting stopping stopped"


def test_a_stop_from_outside(fake) -> None:
    supervisor = fake()
    supervisor.start()
    supervisor.wait_ready(30)
    record = StateFile().read()
    assert record is not None and stop_engine(StateFile(), record)
    assert supervisor.wait_stopped(30)
    assert _states(supervisor) == "starting ready stopped"


def test_a_start_that_times_out(fake) -> None:
    supervisor = fake("--mute", start_timeout_s=0.5)
    supervisor.start()
    with pytest.raises(EngineError, match="did not become ready within 0.5 s"):
        supervisor.wait_ready(30)
    assert _states(supervisor) == "starting stopping stopped"


def test_a_spawn_that_fails(tmp_path: Path) -> None:
    spec = EngineSpec(argv=(str(tmp_path / "no-such-engine"),), model="x", port=free_port())
    supervisor = Supervisor(spec, PROFILE, policy=FAST, state_file=StateFile())
    with pytest.raises(EngineError, match="does not exist"):
        supervisor.start()
    assert _states(supervisor) == "stopped"
    assert supervisor.failure is not None and "does not exist" in supervisor.failure.message


def test_adopting_a_released_engine(fake) -> None:
    first = fake(detached=True)
    first.start()
    first.wait_ready(30)
    first.release()
    record = StateFile().live()
    assert record is not None
    second = fake(detached=True)
    second.adopt(record)
    assert second.wait_ready(30).pid == record.pid
    second.stop()
    assert _states(first) == "starting ready"
    assert _states(second) == "starting ready stopping stopped"


def test_a_refused_transition_stops_the_engine(fake, monkeypatch) -> None:
    without_ready = {**TRANSITIONS, State.STARTING: TRANSITIONS[State.STARTING] - {State.READY}}
    monkeypatch.setattr(states, "TRANSITIONS", without_ready)
    supervisor = fake()
    supervisor.start()
    pid = supervisor.pid
    with pytest.raises(EngineError, match="no transition from starting to ready"):
        supervisor.wait_ready(30)
    assert _words(supervisor) == "starting stopping stopped"
    assert supervisor.events[-1].failure.title == "Supervisor failed"
    assert pid is not None and not alive(pid)
