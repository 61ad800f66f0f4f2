"""Each agent is told only what it accepts, and a window below that is said plainly with the
plan that gives it enough: the offer is the real planner's, on the served model's geometry."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.agents.catalog import AGENTS, prepare, workload_for
from homelab.agents.limits import CLAUDE_MINIMUM_TOKENS, LIMITS, agent_limit
from homelab.agents.shortfall import parallel_that_fits, plan_offer, shortfall
from homelab.engine.options import plan_options
from homelab.errors import UsageError
from tests.agents.conftest import plan_facts, split_target, unified_target
from tests.agents.test_agent_cli import homelab

GIB = 1 << 30


def test_claude_code_is_told_its_window_and_never_a_compaction_window_it_overrides(
    llama8b_gguf: Path,
) -> None:
    small = plan_facts(llama8b_gguf, vram=24 * GIB, ctx=65536, slots=2)  # 2 × 32,768
    env = prepare("claude", split_target(small)).env
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32768"
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in env  # 2.1.328 would read it as 100,000
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" in prepare("claude", split_target(small)).unset
    roomy = plan_facts(llama8b_gguf, vram=24 * GIB, ctx=131072, slots=1)
    setup = prepare("claude", split_target(roomy))
    assert setup.env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "131072"
    assert setup.env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "131072"
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in setup.unset


def test_only_claude_code_has_a_floor_and_every_agent_has_a_rule() -> None:
    assert set(LIMITS) == set(AGENTS)
    assert agent_limit("claude").minimum_tokens == CLAUDE_MINIMUM_TOKENS == 100_000
    assert not agent_limit("claude").accepts(99_999) and agent_limit("claude").accepts(100_000)
    for name in ("codex", "opencode", "aider", "continue"):
        assert agent_limit(name).accepts(1024), name
    assert agent_limit("nobody").accepts(1)  # unknown: no floor invented
    assert workload_for("claude").tokens_per_slot == 100_000
    assert workload_for("codex").tokens_per_slot == 100_000  # homelab's agent workload
    with pytest.raises(UsageError, match="knows no agent"):
        workload_for("nobody")


def test_a_2x32k_plan_is_offered_the_planners_plan_for_claude_code(llama8b_gguf: Path) -> None:
    small = plan_facts(llama8b_gguf, vram=24 * GIB, ctx=65536, slots=2)
    target = split_target(small)
    assert shortfall("opencode", "OpenCode", target, small) is None  # it takes any window
    options = plan_options(workload=workload_for("claude"), vram=24 * GIB)
    offer, note = plan_offer("claude", "Claude Code", str(llama8b_gguf), "llama.cpp", options)
    expected = plan_facts(llama8b_gguf, vram=24 * GIB, workload=workload_for("claude"))
    assert offer is not None and note is None
    assert (offer.slots, offer.ctx_per_slot) == (expected.slots, expected.ctx_per_slot)
    assert offer.ctx_per_slot >= 100_000 and offer.command.endswith("--for claude --replace")
    short = shortfall("claude", "Claude Code", target, small, (offer, note))
    assert short is not None and (short.tokens, short.minimum) == (32768, 100_000)
    assert short.parallel is None  # 65,536 in all: no --parallel gives one slot 100k
    line = short.line()
    assert f"re-plan as {offer.slots} × {offer.ctx_per_slot:,}?" in line and "\n" not in line
    assert short.to_json()["offer"]["ctx_per_slot"] == offer.ctx_per_slot


def test_the_parallel_that_fits_comes_from_the_same_context(llama8b_gguf: Path) -> None:
    four = plan_facts(llama8b_gguf, vram=24 * GIB, ctx=262144, slots=4)  # 4 × 65,536
    assert parallel_that_fits(four, 100_000) == 2
    assert parallel_that_fits(four, 300_000) is None
    pooled = plan_facts(llama8b_gguf, vram=24 * GIB, ctx=131072, slots=4, unified=True)
    assert parallel_that_fits(pooled, 100_000) is None  # a pool only grows with -c
    short = shortfall("claude", "Claude Code", unified_target(pooled), pooled)
    assert short is None or short.parallel is None


def test_a_model_too_short_for_the_agent_says_so_instead_of_offering(smollm2_gguf) -> None:
    options = plan_options(workload=workload_for("claude"), vram=8 * GIB)
    offer, note = plan_offer("claude", "Claude Code", str(smollm2_gguf), "llama.cpp", options)
    assert offer is not None and offer.ctx_per_slot == 8192  # its trained context
    assert note is not None and "at most 8,192 tokens" in note
    facts = plan_facts(smollm2_gguf, vram=8 * GIB, ctx=4096, slots=4)
    short = shortfall("claude", "Claude Code", split_target(facts), facts, (offer, note))
    assert short is not None and "re-plan as" not in short.line()
    assert "serve a model with a longer context" in short.line()


def test_an_offer_that_cannot_be_planned_names_the_command_and_why(tmp_path: Path) -> None:
    missing = tmp_path / "gone.gguf"
    options = plan_options(workload=workload_for("claude"), vram=8 * GIB)
    offer, note = plan_offer("claude", "Claude Code", str(missing), "llama.cpp", options)
    assert offer is None and note is not None
    assert f"homelab serve {missing} --for claude --replace" in note


def test_plan_for_claude_plans_each_slot_for_its_minimum(llama8b_gguf: Path) -> None:
    planned = homelab("plan", str(llama8b_gguf), "--vram", "24GiB", "--for", "claude")
    assert planned.returncode == 0, planned.stderr
    expected = plan_facts(llama8b_gguf, vram=24 * GIB, workload=workload_for("claude"))
    assert f"slots × {expected.ctx_per_slot:,} tokens" in planned.stdout
    assert "Claude Code (100,000 tokens per conversation)" in planned.stdout
    both = homelab(
        "plan", str(llama8b_gguf), "--vram", "24GiB", "--for", "claude", "--workload", "chat"
    )
    assert both.returncode == 2 and "not both" in both.stderr and "Traceback" not in both.stderr
    unknown = homelab("plan", str(llama8b_gguf), "--for", "nobody")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr
