"""Fixtures of the agent tests: plan facts from the real planner, and targets built on them.

Facts come from ``LlamaCpp().plan`` (the path ``homelab serve`` takes) on the real SmolLM2
and on a generated Llama-3.1-8B-shaped GGUF (tests/factory, trained context 131,072), each
against a synthetic card, so the per-slot share is the planner's, not a number typed here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.agents.target import AgentTarget, target_for
from homelab.engine.llamacpp.kind import LlamaCpp
from homelab.engine.options import plan_options
from homelab.engine.supervision.facts import PlanFacts
from homelab.plan.card import card_for
from tests.engine.conftest import engines  # noqa: F401  (the same leftover-engine guard)
from tests.factory import write_gguf

GIB = 1 << 30
GATE_MARGIN = 0.85
"""The gate's default ceiling on a unified pool: the KV cells allocated × 0.85 (issue 9)."""


def plan_facts(model: Path, **options: object) -> PlanFacts:
    """What ``homelab serve MODEL`` would record for these plan options."""
    request = plan_options(**options)  # type: ignore[arg-type]
    return LlamaCpp().plan(str(model), card_for(request), request).facts


def gate_ceiling(facts: PlanFacts) -> int:
    """A gate budget as the gate computes its default for a unified pool."""
    return int(facts.kv_tokens * GATE_MARGIN)


@pytest.fixture(scope="session")
def llama8b_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GGUF with Llama-3.1-8B's attention geometry (trained context 131,072)."""
    return write_gguf("llama", tmp_path_factory.mktemp("agents-model") / "llama8b.gguf")


@pytest.fixture(scope="session")
def smol_split(smollm2_gguf: Path) -> PlanFacts:
    """SmolLM2 at -c 4096 over 4 split slots (1,024 tokens each)."""
    return plan_facts(smollm2_gguf, vram=8 * GIB, ctx=4096, slots=4)


@pytest.fixture(scope="session")
def smol_unified(smollm2_gguf: Path) -> PlanFacts:
    """SmolLM2 at -c 4096 with 4 slots sharing one unified pool (issue 9's failing case)."""
    return plan_facts(smollm2_gguf, vram=8 * GIB, ctx=4096, slots=4, unified=True)


@pytest.fixture(scope="session")
def llama_split(llama8b_gguf: Path) -> PlanFacts:
    """The 8B geometry at -c 131072 over 2 slots (65,536 tokens each)."""
    return plan_facts(llama8b_gguf, vram=24 * GIB, ctx=131072, slots=2)


@pytest.fixture(scope="session")
def llama_unified(llama8b_gguf: Path) -> PlanFacts:
    """The 8B geometry at -c 131072, 4 slots on a unified pool."""
    return plan_facts(llama8b_gguf, vram=24 * GIB, ctx=131072, slots=4, unified=True)


def split_target(facts: PlanFacts, *, api_key: str | None = None) -> AgentTarget:
    """Behind the gate, split slots (the gate's ceiling is the per-slot share)."""
    return target_for(
        facts,
        base_url="http://127.0.0.1:8080",
        model="model.gguf",
        gated=True,
        gate_budget_tokens=facts.ctx_per_slot,
        api_key=api_key,
    )


def unified_target(facts: PlanFacts, *, api_key: str | None = None) -> AgentTarget:
    """Behind the gate, a unified pool (the gate's default ceiling)."""
    return target_for(
        facts,
        base_url="http://127.0.0.1:8080",
        model="model.gguf",
        gated=True,
        gate_budget_tokens=gate_ceiling(facts),
        api_key=api_key,
    )
