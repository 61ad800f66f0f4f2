"""The serve session's gate follows its engine onto another plan: when a ready engine's
record names other plan facts (a restart on a new plan: the TUI's re-plan, a heal), the
gate takes the new limits on its live queue and the record's per-request ceiling follows
— the gate on this process's thread through the session, a detached gate process by
watching the record. Real llama-server (SmolLM2) and real gates."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.engine.supervision.state_file import StateFile
from homelab.gate.config_file import GateChoices
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.factory.server_log import free_port
from tests.gate.conftest import wait_for
from tests.gate_serve.helpers import chat, gate_state, wait_gates_gone

pytestmark = pytest.mark.engine


@pytest.mark.parametrize("detach", [False, True], ids=["thread", "detached"])
def test_a_ready_engine_on_another_plan_gives_the_gate_its_limits(
    smollm2_gguf: Path, engines, gates, detach: bool
) -> None:
    port = free_port()
    options = plan_options(vram=8 << 30, ctx=1024, slots=2, port=port)
    session = ServeSession(
        ServeRequest(str(smollm2_gguf), options, gate=GateChoices(), detach=detach, hold=True)
    )
    try:
        session.start()
        engines.track(session.supervisor.pid)
        session.wait_ready()
        gate_url = f"http://127.0.0.1:{port}"
        store = StateFile()
        record = store.read()
        before = gate_state(gate_url)
        assert (before["max_concurrent"], before["ceiling_tokens"]) == (2, 512)
        assert record.gate_budget_tokens == 512

        newer = replace(record.facts, slots=1, ctx_per_slot=1024)  # the engine re-planned
        store.update(record.pid, facts=newer)
        session.gate.changed("ready", record.pid)  # what the supervisor says after it
        state = wait_for(lambda: (s := gate_state(gate_url))["max_concurrent"] == 1 and s)
        assert (state["budget_tokens"], state["ceiling_tokens"]) == (1024, 1024)
        wait_for(lambda: store.read().gate_budget_tokens == 1024)
        assert chat(gate_url).status_code == 200  # and it still serves
    finally:
        session.stop(let_go=False)
        session.end()
        session.close()
    assert wait_gates_gone()
