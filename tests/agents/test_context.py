"""The context one request can use, from real plans: the per-slot share for split slots, the
gate's ceiling for a unified pool; never the trained maximum nor the whole ``-c``."""

from __future__ import annotations

from homelab.agents.target import DEFAULT_MAX_OUTPUT_TOKENS, output_tokens, request_context
from homelab.gguf.geometry import geometry_of
from homelab.gguf.model_file import read_model
from tests.agents.conftest import gate_ceiling, plan_facts, split_target, unified_target

GIB = 1 << 30


def test_split_slots_give_each_request_its_share_not_the_whole_ctx(smol_split, llama_split):
    for facts in (smol_split, llama_split):
        assert not facts.unified and facts.slots > 1
        context = request_context(facts, gated=True, gate_budget_tokens=facts.ctx_per_slot)
        assert context.tokens == facts.ctx_per_slot
        assert context.tokens * facts.slots == facts.ctx_total  # a share, not the total
        assert f"{facts.slots} slots × {facts.ctx_per_slot:,}" in context.source
        without_gate = request_context(facts, gated=False)
        assert without_gate.tokens == facts.ctx_per_slot and not without_gate.shared_pool


def test_a_default_plan_hands_out_its_share_not_the_trained_maximum(llama8b_gguf):
    facts = plan_facts(llama8b_gguf, vram=24 * GIB)
    trained = geometry_of(read_model(llama8b_gguf)).trained_ctx
    assert trained == 131072 and facts.ctx_per_slot < trained
    target = split_target(facts)
    assert target.context_tokens == facts.ctx_per_slot
    assert target.context_tokens not in (trained, facts.ctx_total)


def test_a_unified_pool_behind_the_gate_gets_the_gates_ceiling(smol_unified, llama_unified):
    for facts in (smol_unified, llama_unified):
        assert facts.unified and facts.ctx_per_slot == facts.kv_tokens  # one pool, any slot
        target = unified_target(facts)
        assert target.context_tokens == gate_ceiling(facts) < facts.kv_tokens
        assert "gate's ceiling" in target.context.source and not target.context.shared_pool


def test_a_unified_pool_without_the_gate_is_flagged_as_shared(smol_unified):
    context = request_context(smol_unified, gated=False)
    assert context.shared_pool and context.tokens == smol_unified.kv_tokens
    assert f"shared by {smol_unified.slots} slots" in context.source


def test_a_lower_gate_budget_bounds_split_slots_too(llama_split):
    budget = llama_split.ctx_per_slot // 2
    context = request_context(llama_split, gated=True, gate_budget_tokens=budget)
    assert context.tokens == budget
    # a budget above the share cannot lift a request past its slot
    higher = request_context(llama_split, gated=True, gate_budget_tokens=budget * 4)
    assert higher.tokens == llama_split.ctx_per_slot


def test_answers_ask_for_the_gate_cap_but_never_more_than_half_the_window(smol_split, llama_split):
    big = split_target(llama_split)
    assert big.max_output_tokens == DEFAULT_MAX_OUTPUT_TOKENS
    small = split_target(smol_split)
    assert small.max_output_tokens == smol_split.ctx_per_slot // 2
    # prompt + answer always fit the ceiling the gate charges them against
    for target in (big, small):
        assert target.input_tokens + target.max_output_tokens == target.context_tokens
    assert output_tokens(10_000, cap=4096) == 4096 and output_tokens(3, cap=4096) == 1
