"""An agent's hand-off to a real set of models: the set's record names the agent, small and
FIM models; the main model (not loaded at first) is loaded through the gate and the context
the agent is told is its engine's own ceiling behind the gate, not the plan's bare share."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.agents.engine_target import running_engine
from homelab.agents.handoff import hand_off
from homelab.engine.options import plan_options
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.set_record import SetMember, new_record, write_set
from tests.gate_set.conftest import ENGINE_ARGS

pytestmark = pytest.mark.engine

GIB = 2**30
UNIFIED_MARGIN = 0.85
"""The gate's share of an engine's per-slot context when it takes its limits from /props."""


def test_claude_and_continue_behind_a_real_set(set_gate, three_models: dict[str, Path]) -> None:
    ctx = int(ENGINE_ARGS[ENGINE_ARGS.index("-c") + 1])
    facts = PlanFacts(1, ctx, ctx, ctx, False, "f16", "f16")
    aliases = {"llama": ("claude-haiku-*",)}
    under = set_gate(
        three_models,
        {k: GIB for k in three_models},
        2 * GIB + GIB // 2,
        ["llama", "qwen3"],
        aliases=aliases,
    )
    workloads = {"smol": "agent", "llama": "chat", "qwen3": "fim"}
    members = tuple(
        SetMember(k, aliases.get(k, ()), workloads[k], {"CPU": GIB}, facts, str(path))
        for k, path in three_models.items()
    )
    write_set(new_record(under.url, members, ("llama", "qwen3"), 512))
    assert under.pool.members["smol"].state == "unloaded"

    served, target = running_engine()
    assert under.pool.members["smol"].state == "loaded"  # loaded to learn its real context
    assert (target.model, target.small_model, target.fim_model) == ("smol", "llama", "qwen3")
    assert target.context_tokens == int(ctx * UNIFIED_MARGIN) < facts.ctx_per_slot
    assert target.max_output_tokens == min(512, target.context_tokens // 2)

    options = plan_options(workload=None, cpu=True, sample_seconds=0.0)
    handed = hand_off("claude", served, target, options, probe=False)
    env = handed.setup.env
    assert env["ANTHROPIC_MODEL"] == "smol"
    assert env["ANTHROPIC_SMALL_FAST_MODEL"] == env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "llama"
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == str(int(ctx * UNIFIED_MARGIN))
    assert handed.shortfall is not None  # 870 tokens is far below Claude Code's minimum
    assert "stop the set" in (handed.shortfall.offer_note or "")

    block = hand_off("continue", served, target, options, probe=False).setup.config_block
    assert block is not None and 'model: "qwen3"' in block and "- autocomplete" in block
