"""The TUI's agent contract line next to the URL, and an agent's name as its workload: the
real app, the real llama-server and SmolLM2 (the suite's no-GPU snapshot plans for RAM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.agents import contract
from homelab.agents.contract import NO_TOOL_CALLS
from tests.factory.server_log import free_port
from tests.ui.helpers import run, wait_until
from tests.ui.test_engine_crash import _server_text
from tests.ui.test_engine_flows import (
    _app,
    _pick_small_plan,
    _quit_stopping_the_engine,
    _start_and_wait_ready,
)

pytestmark = pytest.mark.engine


def test_the_agents_are_checked_on_their_own_when_ready(
    models_dir: Path, engine_pids, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SmolLM2's template emits no tool calls on any route (tests/agents/
    test_contract_engine.py), so the one line for every agent is that: on the panel once the
    engine is ready, with nothing asked; kept for that URL and model (not probed again), and
    run again when asked."""
    monkeypatch.setattr(contract, "PROBE_TIMEOUT_S", 600.0)  # a loaded 2-core CPU runner
    probes: list[str] = []
    real_check = contract.check_served

    def counted(url: str, key: str | None):
        probes.append(url)
        return real_check(url, key)

    monkeypatch.setattr(contract, "check_served", counted)

    async def drive() -> None:
        app = _app(models_dir, free_port(), check_agents=True)
        async with app.run_test(size=(140, 45)) as pilot:
            app.action_check_agents()  # nothing ready: said, nothing probed
            assert app.state.agent_contract is None
            await _pick_small_plan(app, pilot)
            await _start_and_wait_ready(app, pilot, engine_pids)
            await wait_until(
                pilot,
                lambda: app.state.agent_contract not in (None, "checking…"),
                timeout=2400,
            )
            assert app.state.agent_contract == NO_TOOL_CALLS
            assert f"agents: {NO_TOOL_CALLS}" in _server_text(app)
            assert len(probes) == 1
            url = probes[0]
            app._check_agents_once(url)  # what a restart into the same model does
            assert app.state.agent_contract == NO_TOOL_CALLS and len(probes) == 1
            app.action_check_agents()  # asked for: probed again
            await wait_until(pilot, lambda: app.state.agent_contract != "checking…", timeout=2400)
            assert len(probes) == 2 and app.state.agent_contract == NO_TOOL_CALLS
            await _quit_stopping_the_engine(app, pilot)

    run(drive())


def test_an_agents_name_is_a_workload_in_the_plan_panel(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir, free_port())
        async with app.run_test(size=(140, 45)) as pilot:
            app.query_one("#workload").focus()
            await pilot.press(*"claude")
            options = app.plan_options()
            assert options.workload.per_slot is not None
            assert options.workload.per_slot.tokens_per_slot == 100_000
            assert options.workload.per_slot.name == "Claude Code"

    run(drive())
