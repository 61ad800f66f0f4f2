"""A re-plan restarts the engine into the new plan under the same session and gate: a
request running and one queued at the gate when it happens are both answered after the
restart (not an error), the gate's limits follow the new plan, the engine's pid changes
and its record (``homelab status``) names the new plan. Real llama-server (SmolLM2), real
gates (on this process's thread, and detached in a process of its own as the TUI runs it),
real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.states import State
from homelab.gate.config_file import GateChoices
from homelab.serve import events as ev
from homelab.serve.replan import Replan, replan
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.engine.supervisor_child import run_homelab
from tests.factory.server_log import free_port
from tests.gate.conftest import wait_for
from tests.gate_serve.helpers import (
    LONG_TOKENS,
    chat,
    gate_state,
    long_chat,
    queued_stream,
    wait_gates_gone,
)

pytestmark = pytest.mark.engine


def restart_same(session: ServeSession) -> Replan:
    """The TUI's ``r``: a restart into the running plan again, its context and slots pinned."""
    plan = session.plan
    assert plan is not None
    alloc = plan.plan.candidate.allocation
    same = session.request.options.pinned(ctx=alloc.n_ctx, slots=plan.plan.settings.n_seq)
    return replan(session, same, why="restart")


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except Exception as error:  # the test asserts on it
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("detach", [False, True], ids=["thread", "detached"])
def test_a_replan_keeps_the_gate_and_answers_what_it_held(
    smollm2_gguf: Path, engines, gates, detach: bool
) -> None:
    port = free_port()
    options = plan_options(vram=8 << 30, ctx=2048, slots=2, port=port)
    request = ServeRequest(
        str(smollm2_gguf),
        options,
        gate=GateChoices(max_concurrent=1),  # one at a time: the second one queues
        detach=detach,
        hold=True,
    )
    session = ServeSession(request)
    try:
        session.start()
        engines.track(session.supervisor.pid)
        session.wait_ready()
        gate_url = f"http://127.0.0.1:{port}"
        before = gate_state(gate_url)
        assert (before["budget_tokens"], before["ceiling_tokens"]) == (2048, 1024)
        old_pid, supervisor = session.supervisor.pid, session.supervisor

        first, first_out = _in_thread(lambda: long_chat(gate_url))
        wait_for(lambda: gate_state(gate_url)["running"] == 1)
        second, second_out = _in_thread(lambda: queued_stream(gate_url))
        wait_for(lambda: gate_state(gate_url)["queued"] == 1)

        done = replan(session, options.pinned(ctx=2048, slots=1))
        engines.track(session.supervisor.pid)

        first.join(300)
        second.join(300)
        assert "error" not in first_out, first_out
        answer = first_out["value"]
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] == LONG_TOKENS
        stream = second_out.get("value")
        assert stream is not None, second_out
        assert "data: [DONE]" in stream and '"error"' not in stream, stream

        # the same supervisor and gate, a new engine on the new plan
        assert session.supervisor is supervisor and session.gate.url == gate_url
        assert done.pid == supervisor.pid != old_pid and not alive(old_pid)
        assert session.plan is done.plan and done.plan.facts.slots == 1
        assert supervisor.state is State.READY
        assert not [t for t in supervisor.events if t.state is State.CRASHED]  # not a crash
        state = wait_for(lambda: (s := gate_state(gate_url))["ceiling_tokens"] == 2048 and s)
        assert state["budget_tokens"] == 2048 and state["refused"]["too_large"] == 0
        assert done.restarted.gate is not None
        assert (done.restarted.gate.budget_tokens, done.restarted.gate.ceiling) == (2048, 2048)
        record = wait_for(lambda: (r := StateFile().read()).gate_budget_tokens == 2048 and r)
        assert record.pid == done.pid and record.facts == done.plan.facts
        assert record.argv[record.argv.index("-np") + 1] == "1"
        status = json.loads(run_homelab("status", "--json").stdout)
        assert status["pid"] == done.pid and status["gate"]["url"] == gate_url
        assert status["gate"]["budget_tokens"] == 2048
        kinds = [type(e) for e in session.events]
        at = kinds.index(ev.Replanning)
        assert ev.GateRetargeted in kinds[at:] and ev.Replanned in kinds[at:]

        again = restart_same(session)  # `r`: the same plan, a new engine, the same gate
        engines.track(again.pid)
        assert again.pid != done.pid and again.restarted.argv == done.restarted.argv
        assert chat(gate_url).status_code == 200
    finally:
        session.stop(let_go=False)
        session.end()
        session.close()
    assert wait_gates_gone()
