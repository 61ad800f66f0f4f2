"""Pricing a vLLM plan before boot: the utilization fraction, the budget, the refusals."""

from __future__ import annotations

import math
import re

import pytest
from vllm_fixture_data import GPU, weights_total

from homelab.errors import DoesNotFitError, UsageError
from homelab.gpu.probe import probe
from homelab.gpu.report import synthetic_report
from homelab.plan.budget import HEADROOM_DISPLAY
from homelab.plan.vllm.plan import vllm_plan
from homelab.plan.vllm.pricing import (
    CUDA_CONTEXT_BYTES,
    ESTIMATE_MARGIN_BYTES,
    RUNTIME_SLACK_BYTES,
    capture_sizes,
)
from homelab.plan.working import render_steps
from homelab.plan.workload import AGENT, CHAT
from homelab.units import GiB


def test_utilization_on_a_wayland_3090_passes_vllms_startup_check(model_dir, wayland_3090) -> None:
    device = wayland_3090.devices[0]
    plan = vllm_plan(model_dir("Qwen__Qwen3-8B"), wayland_3090)
    visible = device.total - device.reserved  # what cudaMemGetInfo calls the total
    util = plan.gpu_memory_utilization
    asked = math.ceil(util * visible)  # vLLM: requested = ceil(total × util)
    assert device.display_active
    # the desktop margin stays free even at the desktop's worst moment, after vLLM's own context
    assert util * visible <= device.free_min - HEADROOM_DISPLAY
    assert asked <= device.free_min - CUDA_CONTEXT_BYTES - RUNTIME_SLACK_BYTES - HEADROOM_DISPLAY
    # and it is the largest such fraction at 3 decimals
    assert math.ceil(
        (util + 0.001) * visible
    ) > device.free_min - CUDA_CONTEXT_BYTES - RUNTIME_SLACK_BYTES - (HEADROOM_DISPLAY)
    assert util < 0.92  # vLLM's default would fail on this card (see the free-memory fixture log)
    assert plan.memory.requested == asked


def test_a_headless_card_keeps_a_smaller_margin(model_dir) -> None:
    report = probe(snapshot=GPU / "rtx3090_headless.json")
    device = report.devices[0]
    plan = vllm_plan(model_dir("Qwen__Qwen3-8B"), report)
    visible = device.total - device.reserved
    fit = device.free_min - CUDA_CONTEXT_BYTES - RUNTIME_SLACK_BYTES - plan.utilization.headroom
    assert plan.utilization.headroom < HEADROOM_DISPLAY and not plan.utilization.display_active
    assert (
        math.ceil(plan.gpu_memory_utilization * visible)
        <= fit
        < math.ceil((plan.gpu_memory_utilization + 0.001) * visible)
    )


def test_budget_is_spent_in_vllms_order(model_dir, wayland_3090) -> None:
    plan = vllm_plan(model_dir("Qwen__Qwen3-8B"), wayland_3090)
    m = plan.memory
    assert m.weights == weights_total("Qwen__Qwen3-8B")
    assert m.kv_pool == m.requested - m.weights - m.activation.total - m.non_torch - m.cuda_graphs
    assert plan.layout.fits(plan.max_model_len, plan.kv_pool)
    assert m.graph_sizes == len(capture_sizes(plan.max_num_seqs, plan.max_num_batched_tokens))


def test_activation_scratch_grows_with_max_num_batched_tokens(model_dir, wayland_3090) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    small = vllm_plan(
        folder, wayland_3090, max_num_seqs=4, max_model_len=4096, max_num_batched_tokens=2048
    )
    big = vllm_plan(
        folder, wayland_3090, max_num_seqs=4, max_model_len=4096, max_num_batched_tokens=4096
    )
    per_token = small.memory.activation.bytes_per_token
    assert big.memory.activation.bytes_per_token == per_token
    assert big.memory.activation.forward - small.memory.activation.forward == 2048 * per_token
    assert (
        small.memory.cuda_graphs == big.memory.cuda_graphs
    )  # capture sizes depend on the sequences here
    assert (
        small.kv_pool - big.kv_pool == 2048 * per_token
    )  # the KV pool pays for the bigger prefill chunk
    assert big.longest_fitting < small.longest_fitting


def test_a_max_model_len_too_big_is_refused_with_the_one_that_fits(model_dir, wayland_3090) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    with pytest.raises(DoesNotFitError) as info:
        vllm_plan(folder, wayland_3090, max_model_len=40_960)
    error = info.value
    assert (
        "40,960" in error.message
        and "GiB" in error.message
        and "--gpu-memory-utilization" in error.message
    )
    fits = int(re.search(r"a context of (\d+) tokens", error.hint or "").group(1))
    plan = vllm_plan(folder, wayland_3090, max_model_len=fits)
    assert plan.max_model_len == fits
    assert not any("estimate margin" in w for w in plan.warnings)
    planned = plan.kv_pool - ESTIMATE_MARGIN_BYTES  # the suggestion keeps the estimate margin free
    assert plan.layout.fits(fits, planned)
    assert not plan.layout.fits(fits + plan.layout.block_size, planned)
    assert plan.vllm_longest >= fits + plan.layout.block_size  # vLLM's own limit is a little higher


def test_an_asked_length_inside_the_estimate_margin_is_kept_with_a_warning(
    model_dir, wayland_3090
) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    edge = vllm_plan(folder, wayland_3090).vllm_longest
    plan = vllm_plan(folder, wayland_3090, max_model_len=edge)
    assert plan.max_model_len == edge
    assert any("estimate margin" in w for w in plan.warnings)
    with pytest.raises(DoesNotFitError):
        vllm_plan(folder, wayland_3090, max_model_len=edge + 1)


def test_a_max_model_len_beyond_the_config_is_a_usage_error(model_dir) -> None:
    with pytest.raises(UsageError, match="40,960"):
        vllm_plan(model_dir("Qwen__Qwen3-8B"), synthetic_report(96 * GiB), max_model_len=65_536)


def test_the_workload_length_is_cut_to_what_fits_with_a_warning(model_dir, wayland_3090) -> None:
    plan = vllm_plan(model_dir("Qwen__Qwen3-8B"), wayland_3090, workload=AGENT)
    assert plan.max_model_len < 40_960
    assert (
        plan.max_model_len
        == plan.longest_fitting // plan.layout.block_size * plan.layout.block_size
    )
    assert any("fit in the KV pool" in w for w in plan.warnings)
    assert plan.max_num_seqs == max(1, math.floor(plan.predicted_concurrency))


def test_a_chat_workload_fits_with_several_sequences(model_dir, wayland_3090) -> None:
    plan = vllm_plan(model_dir("openai__gpt-oss-20b"), wayland_3090, workload=CHAT)
    assert plan.max_model_len == CHAT.tokens_per_slot
    assert 1 < plan.max_num_seqs <= 16
    assert plan.max_num_seqs <= plan.predicted_concurrency


def test_weights_that_do_not_fit_are_refused_with_the_numbers(model_dir, wayland_3090) -> None:
    with pytest.raises(DoesNotFitError) as info:
        vllm_plan(model_dir("mistralai__Mistral-Small-24B-Instruct-2501"), wayland_3090)
    assert "43.91 GiB" in info.value.message  # the weights: 47,150,000,000 B
    assert "quantized" in (info.value.hint or "")


def test_fp8_cache_roughly_doubles_the_context(model_dir, wayland_3090) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    auto = vllm_plan(folder, wayland_3090, max_num_seqs=1)
    fp8 = vllm_plan(folder, wayland_3090, max_num_seqs=1, kv_cache_dtype="fp8")
    assert fp8.kv_pool == auto.kv_pool
    assert 2 * auto.longest_fitting - 32 <= fp8.longest_fitting <= 2 * auto.longest_fitting + 32


def test_hybrid_batch_is_raised_to_the_attention_block(model_dir, wayland_3090) -> None:
    plan = vllm_plan(model_dir("Qwen__Qwen3.5-0.8B"), wayland_3090, max_num_batched_tokens=256)
    assert plan.layout.block_size > 256
    assert plan.max_num_batched_tokens >= plan.layout.block_size
    assert any("raised from 256" in w for w in plan.warnings)


def test_mla_model_is_priced_on_a_big_card(model_dir) -> None:
    plan = vllm_plan(model_dir("deepseek-ai__DeepSeek-V2-Lite"), synthetic_report(96 * GiB))
    assert plan.max_model_len == AGENT.tokens_per_slot
    assert plan.layout.token_layer_bytes == (512 + 64) * 2


def test_no_gpu_is_a_usage_error(model_dir) -> None:
    with pytest.raises(UsageError, match="NVIDIA GPU"):
        vllm_plan(model_dir("Qwen__Qwen3-8B"), probe(snapshot=GPU / "no_gpu.json"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_model_len": 0},
        {"max_num_seqs": -1},
        {"max_num_batched_tokens": 0},
        {"max_model_len": 8192.5},
    ],
)
def test_nonsense_flags_are_usage_errors(model_dir, wayland_3090, kwargs) -> None:
    with pytest.raises(UsageError):
        vllm_plan(model_dir("Qwen__Qwen3-8B"), wayland_3090, **kwargs)


def test_fewer_batched_tokens_than_sequences_is_refused_like_vllm_does(
    model_dir, wayland_3090
) -> None:
    with pytest.raises(UsageError, match="max-num-batched-tokens"):
        vllm_plan(
            model_dir("Qwen__Qwen3-8B"), wayland_3090, max_num_seqs=64, max_num_batched_tokens=32
        )


def test_steps_show_the_working(model_dir, wayland_3090) -> None:
    plan = vllm_plan(model_dir("Qwen__Qwen3.5-0.8B"), wayland_3090)
    text = "\n".join(render_steps(plan.steps))
    assert f"--gpu-memory-utilization {plan.gpu_memory_utilization:.3f}" in text
    assert f"{plan.layout.kv_bytes_per_token:,} B per token" in text
    assert "linear-attention layers keep a state per request" in text
    assert f"{plan.predicted_kv_tokens:,} tokens" in text
    assert "--enable-prefix-caching" in text


def _step(steps, what: str):
    (row,) = [s for s in steps if s.what.startswith(what)]
    return row


def test_steps_are_rows_with_the_plans_bytes(model_dir, wayland_3090) -> None:
    plan = vllm_plan(model_dir("Qwen__Qwen3-8B"), wayland_3090)
    steps, mem = plan.steps, plan.memory
    spent = [s for s in steps if s.sign == "−" and s.level == 1][3:]  # after the card's terms
    assert [s.value for s in spent] == [
        mem.weights,
        mem.activation.total,
        mem.non_torch,
        mem.cuda_graphs,
    ]
    pool = _step(steps, "KV pool")
    assert pool.value == plan.kv_pool == mem.requested - sum(s.value for s in spent)
    assert _step(steps, "Budget").value == mem.requested
    assert _step(steps, f"--max-model-len {plan.max_model_len:,}").value == plan.request_bytes
    assert _step(steps, "Expect at start-up").value == plan.predicted_kv_tokens
