"""Each agent is told the answer bound the gate really enforces (its ``max_tokens_cap``, from
the engine record), and a cap below the plan's room for an answer is said in one line with
its fix. Targets are built on the real planner's facts for SmolLM2."""

from __future__ import annotations

import json

import pytest

from homelab.agents import continue_dev
from homelab.agents.catalog import AGENTS, prepare
from homelab.agents.claude import MAX_OUTPUT_TOKENS
from homelab.agents.limits import agent_limit
from homelab.agents.opencode import CONFIG_VARIABLE
from homelab.agents.target import DEFAULT_MAX_OUTPUT_TOKENS, target_for
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.record import EngineRecord
from homelab.gate.config_file import config_path
from tests.agents.conftest import plan_facts

GIB = 1 << 30


@pytest.fixture(scope="module")
def smol_whole(smollm2_gguf) -> PlanFacts:
    """SmolLM2 at its trained 8,192 tokens, one slot (the real-agent tests' plan)."""
    return plan_facts(smollm2_gguf, vram=8 * GIB, ctx=8192, slots=1)


def gated(facts: PlanFacts, cap: int | None, *, through_gate: bool = True):
    return target_for(
        facts,
        base_url="http://127.0.0.1:8080",
        model="SmolLM2",
        gated=through_gate,
        gate_budget_tokens=facts.ctx_per_slot if through_gate else None,
        gate_max_tokens=cap,
    )


def told(agent: str, setup) -> int:
    """The answer bound in what ``agent`` is handed (its own key for it)."""
    if agent == "claude":
        return int(setup.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"])
    if agent == "opencode":
        config = json.loads(setup.env[CONFIG_VARIABLE])
        return config["provider"]["homelab"]["models"]["SmolLM2"]["limit"]["output"]
    if agent == "continue":
        return continue_dev.max_tokens(setup.target)
    return setup.target.max_output_tokens  # aider's metadata, Codex (sends none)


@pytest.mark.parametrize("agent", list(AGENTS))
def test_every_agent_is_told_the_gates_cap_and_told_why_it_is_low(
    agent: str, smol_whole: PlanFacts
) -> None:
    assert smol_whole.ctx_per_slot == 8192
    plain = prepare(agent, gated(smol_whole, None))  # a record that does not say: the default
    assert plain.target.max_output_tokens == 4096 and told(agent, plain) <= 4096
    assert not any("max_tokens_cap" in w for w in plain.warnings)
    low = prepare(agent, gated(smol_whole, 64))
    assert low.target.max_output_tokens == 64 and told(agent, low) == 64
    cut = [w for w in low.warnings if "max_tokens_cap" in w]
    assert len(cut) == 1, low.warnings
    line = cut[0]
    assert "cuts every answer at 64 tokens" in line and "4,096 this plan leaves" in line
    assert agent_limit(agent).output_rule in line  # the agent's own rule, said
    assert f"`max_tokens_cap = 4096` in {config_path()}" in line and "--replace" in line
    assert "\n" not in line


def test_a_cap_at_or_above_the_plans_room_is_no_warning_and_told_as_far_as_the_window_allows(
    smol_whole: PlanFacts,
) -> None:
    at = prepare("claude", gated(smol_whole, 4096))
    assert at.target.max_output_tokens == 4096 and not any(
        "max_tokens_cap" in w for w in at.warnings
    )
    above = prepare("claude", gated(smol_whole, 100_000))  # the gate allows more: half the window
    assert above.target.max_output_tokens == 4096
    assert above.target.gate_max_tokens == 100_000


def test_no_gate_means_no_gate_cap(smol_whole: PlanFacts) -> None:
    bare = prepare("claude", gated(smol_whole, 64, through_gate=False))
    assert bare.target.gate_max_tokens is None
    assert bare.target.max_output_tokens == min(DEFAULT_MAX_OUTPUT_TOKENS, 8192 // 2)
    assert not any("max_tokens_cap" in w for w in bare.warnings)


def test_claude_code_is_never_told_more_than_it_takes(llama8b_gguf) -> None:
    huge = plan_facts(llama8b_gguf, vram=24 * GIB, ctx=131072, slots=1)
    setup = prepare("claude", gated(huge, 1_000_000))  # 65,536: half the window
    assert setup.target.max_output_tokens == 65_536
    assert int(setup.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]) <= MAX_OUTPUT_TOKENS


def _record(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "version": 1,
        "engine": "llama.cpp",
        "pid": 4242,
        "pgid": 4242,
        "create_time": 1.0,
        "argv": ["llama-server"],
        "host": "127.0.0.1",
        "port": 8081,
        "model": "/m.gguf",
        "log_path": "/tmp/l.log",
        "started_at": 1.0,
        "detached": True,
        "gate_url": "http://127.0.0.1:8080",
    }
    return base | fields


def test_the_record_keeps_the_gates_cap_strictly() -> None:
    kept = EngineRecord.from_json(_record(gate_max_tokens=64))
    assert kept.gate_max_tokens == 64
    assert EngineRecord.from_json(kept.to_json()) == kept
    assert EngineRecord.from_json(_record()).gate_max_tokens is None  # an older record
    for bad in (0, -5, "64", True, 6.4):
        with pytest.raises((TypeError, ValueError), match="gate_max_tokens"):
            EngineRecord.from_json(_record(gate_max_tokens=bad))
