"""vLLM over two cards: --tensor-parallel-size on equal cards, priced per card; unequal refused."""

from __future__ import annotations

import json
import math

import pytest
from vllm_fixture_data import CONFIGS, GPU, weights_total

from homelab.engine.options import plan_options
from homelab.engine.vllm.argv import vllm_argv
from homelab.errors import DoesNotFitError, UsageError
from homelab.gpu.probe import probe
from homelab.plan.vllm.plan import plan_vllm, vllm_plan
from homelab.plan.working import render_steps
from homelab.plan.workload import CHAT

QWEN = "Qwen__Qwen3-8B"


def test_two_equal_cards_split_weights_and_kv_heads(model_dir) -> None:
    report = probe(snapshot=GPU / "constructed_two_equal.json", window_s=0)
    one = vllm_plan(model_dir(QWEN), report, workload=CHAT, device_indices=(0,))
    two = vllm_plan(model_dir(QWEN), report, workload=CHAT, device_indices=(0, 1))
    assert one.tensor_parallel_size == 1 and two.tensor_parallel_size == 2
    tp = two.tensor_parallel
    assert tp is not None
    assert tp.weights_per_card == math.ceil(weights_total(QWEN) / 2) == two.memory.weights
    heads = json.loads((CONFIGS / QWEN / "config.json").read_text())["num_key_value_heads"]
    assert tp.kv_heads_per_card == heads // 2 == two.model.num_kv_heads
    # each card's pool holds half of every token: more tokens fit than on one card
    assert two.layout.bytes_per_block * 2 == one.layout.bytes_per_block
    assert two.kv_pool > one.kv_pool and two.predicted_kv_tokens > 2 * one.predicted_kv_tokens
    assert two.gpu_memory_utilization == one.gpu_memory_utilization  # equal, empty cards
    argv = vllm_argv(two)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert "--tensor-parallel-size" not in vllm_argv(one)
    text = "\n".join(render_steps(two.steps))
    assert "Tensor parallel: --tensor-parallel-size 2 over GPU 0" in text


def test_unequal_cards_are_refused_with_the_reason(model_dir) -> None:
    report = probe(snapshot=GPU / "constructed_mixed_24_12_display_small.json", window_s=0)
    with pytest.raises(UsageError, match="equal slice") as caught:
        plan_vllm(model_dir(QWEN), report, plan_options(engine="vllm", gpu=(0, 1)))
    assert "RTX 3060" in caught.value.message and "llama.cpp" in (caught.value.hint or "")


def test_heads_that_do_not_divide_are_refused(model_dir) -> None:
    config = json.loads((CONFIGS / QWEN / "config.json").read_text())
    config["num_attention_heads"] = 31
    report = probe(snapshot=GPU / "constructed_two_equal.json", window_s=0)
    with pytest.raises(UsageError, match="31 attention heads"):
        vllm_plan(model_dir(QWEN, config), report, device_indices=(0, 1))


def test_the_tightest_card_sets_the_fraction(model_dir) -> None:
    report = probe(snapshot=GPU / "constructed_one_card_busy.json", window_s=0)
    # 2.5 GiB free on GPU 0: the fraction it allows is every card's, too small for 1/2 of Qwen3-8B
    with pytest.raises(DoesNotFitError, match="does not fit vLLM's budget on GPU 0"):
        vllm_plan(model_dir(QWEN), report, device_indices=(0, 1))
    alone = vllm_plan(model_dir(QWEN), report, device_indices=(1,))
    assert alone.gpu_memory_utilization > 0.5
