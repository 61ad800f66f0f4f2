"""``R`` with the gate in front: the engine restarts into the new plan under the same gate.

The TUI serves behind the admission gate (a detached gate process, as the app runs it):
``R`` re-plans and restarts the engine in place, so a request running and one queued at
the gate when ``R`` is pressed are both answered by the new engine (not an error), the
gate's port never goes away, its limits are the new plan's, the engine's pid changed and
its record names the new plan; the server panel says so. Real llama-server + SmolLM2, the
real gate, real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from tests.factory.clock import ManualClock
from tests.gate_serve.helpers import (
    LONG_TOKENS,
    gate_state,
    long_chat,
    queued_stream,
    wait_gates_gone,
)
from tests.ui.helpers import run, wait_until
from tests.ui.test_engine_flows import _another_ready, _quit_stopping_the_engine
from tests.ui.test_live_growth import WAIT_S
from tests.ui.test_replan import growth_app, serve_one_slot

pytestmark = pytest.mark.engine


def _in_thread(fn, out: dict, key: str) -> threading.Thread:
    def go() -> None:
        try:
            out[key] = fn()
        except Exception as error:  # asserted below
            out[key] = error

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


def test_R_with_the_gate_answers_what_the_gate_held_and_keeps_its_port(
    models_dir: Path, engine_pids
) -> None:
    clock = ManualClock()
    out: dict = {}

    async def drive() -> None:
        app = growth_app(models_dir, clock)
        async with app.run_test(size=(140, 45)) as pilot:
            await serve_one_slot(app, pilot, engine_pids)  # the gate lets one run at a time
            await wait_until(pilot, lambda: app.state.running.session.gate.url, 60)
            gate_url, supervisor = app.state.running.session.gate.url, app.state.running.supervisor
            old, old_pid = app.state.running.plan, supervisor.pid

            first = _in_thread(lambda: long_chat(gate_url), out, "first")
            await wait_until(pilot, lambda: gate_state(gate_url)["running"] == 1, WAIT_S)
            second = _in_thread(lambda: queued_stream(gate_url), out, "second")
            await wait_until(pilot, lambda: gate_state(gate_url)["queued"] == 1, WAIT_S)

            await pilot.press("R")
            await wait_until(
                pilot,
                lambda: _another_ready(app, old_pid) and app.state.running.plan is not old,
                120,
            )
            engine_pids.add(app.state.running.supervisor.pid)
            await wait_until(pilot, lambda: not first.is_alive() and not second.is_alive(), 300)
            answer = out["first"]
            assert not isinstance(answer, Exception), answer
            assert answer.status_code == 200, answer.text
            assert answer.json()["usage"]["completion_tokens"] == LONG_TOKENS
            stream = out["second"]
            assert isinstance(stream, str), stream
            assert "data: [DONE]" in stream and '"error"' not in stream, stream

            # the same supervisor and gate; a new engine on the new plan
            assert (
                app.state.running.supervisor is supervisor
                and app.state.running.session.gate.url == gate_url
            )
            assert not alive(old_pid)
            facts = app.state.running.session.plan.facts
            assert app.state.running.session.plan.plan is app.state.running.plan
            state = gate_state(gate_url)
            assert state["max_concurrent"] == 1 and state["ceiling_tokens"] == facts.ctx_per_slot
            assert state["budget_tokens"] == facts.ctx_per_slot * facts.slots
            record = StateFile().read()
            assert record.pid == app.state.running.supervisor.pid and record.facts == facts
            assert record.gate_url == gate_url

            server = str(app.query_one("#server-state").render())
            assert "re-planned on the card now" in server
            assert (
                f"pid {old_pid} → {app.state.running.supervisor.pid}, behind the same gate"
                in server
            )
            assert "queued requests keep their place" in server
            assert "restarts 0" in server  # a restart into a plan, not a crash
            await _quit_stopping_the_engine(app, pilot)

    run(drive())
    assert wait_gates_gone()
