"""Routed experts in system RAM, from the header: which tensors llama.cpp's ``--n-cpu-moe``
moves, what stays on the card, what its loader maps in RAM, and the plan that says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.engine.options import plan_options
from homelab.errors import UsageError
from homelab.gguf.model_file import read_model
from homelab.gpu.report import synthetic_report
from homelab.plan.budget import place_weights
from homelab.plan.placement import (
    EVERY_BLOCK,
    expert_block,
    is_routed_expert,
    plan_ram,
    ram_share,
    with_experts_in_ram,
)
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.units import GiB
from tests.factory import write_gguf

# llama.cpp's own pattern (common/common.h, LLM_FFN_EXPS_REGEX), written out again here
LLAMA_CPP = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


@pytest.mark.parametrize(
    ("name", "block"),
    [
        ("blk.0.ffn_gate_exps.weight", 0),
        ("blk.3.ffn_up_exps.weight", 3),
        ("blk.12.ffn_down_exps.weight", 12),
        ("blk.4.ffn_gate_up_exps.weight", 4),
        ("blk.5.ffn_down_chexps.weight", 5),
        ("blk.6.ffn_up_exps.bias", 6),  # gpt-oss's expert biases move with them
        ("blk.0.ffn_up_shexp.weight", None),  # shared experts stay on the card
        ("blk.0.ffn_gate_inp.weight", None),  # the router too
        ("blk.0.ffn_exp_probs_b.bias", None),
        ("blk.0.ffn_up.weight", None),  # a dense FFN
        ("blk.0.attn_q.weight", None),
        ("token_embd.weight", None),
        ("output.weight", None),
    ],
)
def test_routed_experts_are_what_llama_cpp_s_pattern_moves(name: str, block: int | None) -> None:
    assert is_routed_expert(name) == (re.search(LLAMA_CPP, name) is not None)
    assert expert_block(name) == block
    if block is not None:  # --n-cpu-moe's per-block override takes it, and no other block's
        assert re.search(rf"blk\.{block}{LLAMA_CPP}", name)
        assert not re.search(rf"blk\.{block + 1}{LLAMA_CPP}", name)


def test_block_1_s_override_does_not_take_block_11() -> None:
    assert expert_block("blk.11.ffn_up_exps.weight") == 11
    assert not re.search(rf"blk\.1{LLAMA_CPP}", "blk.11.ffn_up_exps.weight")


@pytest.fixture(scope="module")
def qwen3moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("moe")
    return write_gguf("qwen3moe", folder / "q3moe.gguf", n_layer=8, n_expert=8, n_ff_exp=512)


def test_experts_per_block_are_the_tensor_table_s_sums(qwen3moe: Path) -> None:
    model = read_model(str(qwen3moe))
    weights = place_weights(model)
    for i, experts in enumerate(weights.experts_per_block):
        table = sum(
            t.n_bytes or 0
            for t in model.tensors
            if t.name.startswith(f"blk.{i}.") and re.search(LLAMA_CPP, t.name)
        )
        assert experts == table > 0
    assert weights.n_cpu_moe == 0


@pytest.mark.parametrize("n", [1, 3, 8])
def test_n_blocks_experts_leave_the_device_and_the_mapped_span_is_the_file_s(
    qwen3moe: Path, n: int
) -> None:
    model = read_model(str(qwen3moe))
    base = place_weights(model)
    moved = with_experts_in_ram(base, n)
    in_ram = [
        t
        for t in model.tensors
        if t.name.startswith("token_embd.")
        or any(re.search(rf"blk\.{i}{LLAMA_CPP}", t.name) for i in range(n))
    ]
    experts = sum(t.n_bytes or 0 for t in in_ram if not t.name.startswith("token_embd."))
    assert moved.on_device() == base.on_device() - experts
    share = ram_share(moved, first_gpu_block=0)
    assert share.experts == experts
    assert share.tensors == sum(t.n_bytes or 0 for t in in_ram)
    first = min(t.offset for t in in_ram)
    last = max(t.offset + (t.n_bytes or 0) for t in in_ram)
    assert share.mapped == last - first >= share.tensors
    # every byte is somewhere: on the device, or in RAM (the embedding only there: the
    # output head is its own tensor here)
    assert moved.on_device() + share.tensors == base.total


def test_a_model_with_no_experts_is_a_usage_error(tmp_path: Path) -> None:
    weights = place_weights(read_model(str(write_gguf("llama", tmp_path / "dense.gguf"))))
    assert not any(weights.experts_per_block)
    with pytest.raises(UsageError, match="no routed experts") as caught:
        with_experts_in_ram(weights, 2)
    assert caught.value.hint


def test_more_blocks_than_the_model_has_clamp_as_llama_cpp_does(qwen3moe: Path) -> None:
    model = read_model(str(qwen3moe))
    options = plan_options(vram=16 * GiB, n_cpu_moe=99, ctx=4096, slots=1)
    assert options.request().n_cpu_moe == 99
    plan = _plan(qwen3moe, 99)
    assert plan.weights.n_cpu_moe == 8
    assert any("the model has 8" in w for w in plan.warnings)
    every = _plan(qwen3moe, EVERY_BLOCK)
    assert every.weights.n_cpu_moe == 8 and not any("the model has" in w for w in every.warnings)
    on_card = place_weights(model, cuda=True)  # the synthetic card is a CUDA card
    assert every.weights_on_device == on_card.on_device() - sum(on_card.experts_per_block)


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_a_negative_or_odd_block_count_is_refused(value: object) -> None:
    with pytest.raises(UsageError, match="experts-in-RAM"):
        plan_options(n_cpu_moe=value)  # type: ignore[arg-type]


def test_both_settings_at_once_are_refused_and_vllm_takes_either() -> None:
    with pytest.raises(UsageError, match="not both"):
        plan_options(n_cpu_moe=2, cpu_moe=True)
    # vLLM keeps experts in RAM too (--cpu-offload-params experts: tests/engine/vllm)
    assert plan_options(engine="vllm", cpu_moe=True).card.n_cpu_moe == EVERY_BLOCK


def _plan(path: Path, n: int | None, *, vram: int = 16 * GiB):
    model = read_model(str(path))
    request = PlanRequest(ctx=4096, parallel=1, n_cpu_moe=n)
    return make_plan(model, str(path), synthetic_report(vram), request)


def test_the_plan_prices_says_and_passes_it(qwen3moe: Path) -> None:
    plain, moe = _plan(qwen3moe, None), _plan(qwen3moe, 3)
    zero = _plan(qwen3moe, 0)  # 0 is none
    assert (zero.steps, zero.warnings, llama_server_argv(zero)) == (
        plain.steps,
        plain.warnings,
        llama_server_argv(plain),
    )
    ram = plan_ram(moe)
    assert ram is not None and plan_ram(plain) is None
    assert moe.weights_on_device == plain.weights_on_device - ram.experts
    # KV and compute stay on the card: the same context and slots, the same KV
    assert moe.candidate.allocation == plain.candidate.allocation
    line = next(s for s in moe.steps if s.what.startswith("Routed experts in system RAM"))
    assert "--n-cpu-moe 3" in line.what and f"{ram.experts:,} B" in line.formula
    argv = llama_server_argv(moe)
    assert argv[argv.index("--n-cpu-moe") + 1] == "3"
    assert "--n-cpu-moe" not in llama_server_argv(plain)
    data = plan_to_dict(moe, argv)
    assert data["n_cpu_moe"] == 3
    check = moe.ram
    assert check is not None
    # beside a CUDA card nothing is repacked (its host buffer comes first): all of it is mapped
    assert check.side.repack == 0 and check.side.mapped == ram.mapped
    assert data["ram"] == {
        "experts": ram.experts,
        "weights": ram.tensors,
        "mapped": ram.mapped,
        "repack": 0,
        "compute": check.side.compute,
        "resident": ram.tensors,  # the CPU's mapped tensors themselves (all of them, here)
        "available": check.available,
        "headroom": check.headroom,
    }
    assert data["budget"]["weights"] == moe.weights_on_device
    assert "n_cpu_moe" not in plan_to_dict(plain, llama_server_argv(plain))


def test_a_plan_for_system_ram_moves_nothing(qwen3moe: Path) -> None:
    from homelab.gpu.cpu import cpu_report

    model = read_model(str(qwen3moe))
    plan = make_plan(
        model, str(qwen3moe), cpu_report("no card"), PlanRequest(ctx=4096, parallel=1, n_cpu_moe=2)
    )
    assert plan.weights.n_cpu_moe == 0 and plan_ram(plan) is None
    assert any("system RAM" in w for w in plan.warnings)
    assert "--n-cpu-moe" not in llama_server_argv(plan)
