"""KV bytes per token and per request, as vLLM's planner counts them, from real configs.

Expected values are derived in each test from the config.json fields (not copied from
the code under test), except the hybrid block sizes, which vLLM itself printed in
public start-up logs ("Setting attention block size to N tokens").
"""

from __future__ import annotations

import copy
import math

import pytest
from vllm_fixture_data import raw_config, text_config

from homelab.errors import UsageError
from homelab.plan.vllm.config import load_model_config
from homelab.plan.vllm.kv import kv_layout

T = 2048  # --max-num-batched-tokens


def _layout(model_dir, name, dtype="auto", batched=T, config=None):
    return kv_layout(load_model_config(str(model_dir(name, config))), dtype, batched)


@pytest.mark.parametrize(
    ("dtype", "element"), [("auto", 2), ("fp8", 1), ("fp8_e4m3", 1), ("fp8_e5m2", 1)]
)
def test_qwen3_8b_kv_per_token(model_dir, dtype, element) -> None:
    raw = raw_config("Qwen__Qwen3-8B")
    layout = _layout(model_dir, "Qwen__Qwen3-8B", dtype)
    per_layer = 2 * raw["num_key_value_heads"] * raw["head_dim"] * element  # K and V
    assert layout.token_layer_bytes == per_layer
    assert layout.kv_bytes_per_token == raw["num_hidden_layers"] * per_layer
    assert layout.block_size == 16 and len(layout.groups) == 1
    # a request pays whole 16-token blocks of every layer
    for length in (1, 16, 17, 40_960):
        assert (
            layout.request_bytes(length) == math.ceil(length / 16) * 16 * layout.kv_bytes_per_token
        )


@pytest.mark.parametrize(
    "name",
    [
        "Qwen__Qwen3-8B",
        "openai__gpt-oss-20b",
        "deepseek-ai__DeepSeek-V2-Lite",
        "mistralai__Mistral-Small-24B-Instruct-2501",
        "google__gemma-3-12b-it",
    ],
)
def test_fp8_halves_the_16_bit_cache(model_dir, name) -> None:
    auto, fp8 = _layout(model_dir, name, "auto"), _layout(model_dir, name, "fp8")
    assert (auto.element_bytes, fp8.element_bytes) == (2, 1)
    assert fp8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token
    assert fp8.request_bytes(32_768) * 2 == auto.request_bytes(32_768)


def test_hybrid_counts_only_full_attention_layers(model_dir) -> None:
    text = text_config("Qwen__Qwen3.5-0.8B")
    layout = _layout(model_dir, "Qwen__Qwen3.5-0.8B")
    n_full = text["layer_types"].count("full_attention")
    assert n_full < text["num_hidden_layers"]
    per_token = n_full * 2 * text["num_key_value_heads"] * text["head_dim"] * 2
    assert layout.kv_bytes_per_token == per_token
    # more context costs only the full layers' KV, block by block; the linear state is fixed
    b = layout.block_size
    assert layout.request_bytes(10 * b) - layout.request_bytes(9 * b) == b * per_token
    n_linear_groups = sum(1 for g in layout.groups if g.kind == "linear")
    fixed = layout.request_bytes(b) - b * per_token
    assert fixed == n_linear_groups * 2 * layout.bytes_per_block  # two states per request per group


def test_hybrid_block_holds_one_linear_state(model_dir) -> None:
    text = text_config("Qwen__Qwen3.5-0.8B")
    layout = _layout(model_dir, "Qwen__Qwen3.5-0.8B")
    conv = (
        (
            2 * text["linear_num_key_heads"] * text["linear_key_head_dim"]
            + text["linear_num_value_heads"] * text["linear_value_head_dim"]
        )
        * (text["linear_conv_kernel_dim"] - 1)
        * 2
    )
    recurrent = (
        text["linear_num_value_heads"]
        * text["linear_value_head_dim"]
        * text["linear_key_head_dim"]
        * 4
    )
    assert layout.linear_state_bytes == conv + recurrent
    assert layout.page_bytes >= layout.linear_state_bytes
    assert (
        layout.page_bytes - layout.token_layer_bytes * 16 < layout.linear_state_bytes
    )  # smallest such block
    assert layout.block_size % 16 == 0


# Block sizes vLLM printed for real Qwen3.5/3.6 checkpoints ("Setting attention block size to N
# tokens ..."), quoted in public deployment notes; the geometry is each model's published text_config.
OBSERVED_BLOCKS = [
    # (what, text_config overrides, --kv-cache-dtype, block vLLM logged)
    (
        "Qwen3.5-9B bf16",
        {"num_hidden_layers": 32, "num_key_value_heads": 4, "linear_num_value_heads": 32},
        "auto",
        528,
    ),
    (
        "Qwen3.5-9B fp8 KV",
        {"num_hidden_layers": 32, "num_key_value_heads": 4, "linear_num_value_heads": 32},
        "fp8",
        1056,
    ),
    (
        "Qwen3.5-27B",
        {"num_hidden_layers": 64, "num_key_value_heads": 4, "linear_num_value_heads": 48},
        "auto",
        784,
    ),
    (
        "Qwen3.6-35B-A3B",
        {"num_hidden_layers": 40, "num_key_value_heads": 2, "linear_num_value_heads": 32},
        "auto",
        1056,
    ),
    (
        "Qwen3.6-35B-A3B fp8 KV",
        {"num_hidden_layers": 40, "num_key_value_heads": 2, "linear_num_value_heads": 32},
        "fp8",
        2096,
    ),
    (
        "Qwen3.5-122B-A10B fp8 KV",
        {"num_hidden_layers": 48, "num_key_value_heads": 2, "linear_num_value_heads": 64},
        "fp8",
        4176,
    ),
]


@pytest.mark.parametrize(
    ("what", "overrides", "dtype", "logged"), OBSERVED_BLOCKS, ids=[o[0] for o in OBSERVED_BLOCKS]
)
def test_hybrid_block_size_matches_what_vllm_logged(
    model_dir, what, overrides, dtype, logged
) -> None:
    raw = copy.deepcopy(raw_config("Qwen__Qwen3.5-0.8B"))
    text = raw["text_config"]
    text.update(
        overrides,
        head_dim=256,
        linear_num_key_heads=16,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
    )
    text["layer_types"] = (["linear_attention"] * 3 + ["full_attention"]) * (
        text["num_hidden_layers"] // 4
    )
    assert _layout(model_dir, "Qwen__Qwen3.5-0.8B", dtype, config=raw).block_size == logged


def test_sliding_window_layers_stop_growing_past_the_window(model_dir) -> None:
    text = text_config("google__gemma-3-12b-it")
    layout = _layout(model_dir, "google__gemma-3-12b-it")
    n_full = text["num_hidden_layers"] // 6
    per_layer = 2 * text["num_key_value_heads"] * 256 * 2
    assert layout.kv_bytes_per_token == n_full * per_layer
    window = text["sliding_window"]
    beyond = window - 1 + T  # a sliding layer never holds more than this many tokens
    long_a, long_b = 4 * beyond, 4 * beyond + 16 * 10
    assert layout.request_bytes(long_b) - layout.request_bytes(long_a) == 160 * n_full * per_layer
    # below the bound the sliding layers grow too
    short_a, short_b = 160, 320
    assert (
        layout.request_bytes(short_b) - layout.request_bytes(short_a)
        == 160 * text["num_hidden_layers"] * per_layer
    )
    # and their share is fixed: ceil(bound / 16) + 1 blocks for each sliding layer
    n_sliding = text["num_hidden_layers"] - n_full
    sliding_share = n_sliding * (math.ceil(beyond / 16) + 1) * 16 * per_layer
    assert (
        layout.request_bytes(long_a)
        == math.ceil(long_a / 16) * 16 * n_full * per_layer + sliding_share
    )


def test_gpt_oss_sliding_share_grows_with_batched_tokens(model_dir) -> None:
    raw = raw_config("openai__gpt-oss-20b")
    small = _layout(model_dir, "openai__gpt-oss-20b", batched=2048)
    n_sliding = raw["layer_types"].count("sliding_attention")
    per_layer = 2 * raw["num_key_value_heads"] * raw["head_dim"] * 2
    blocks = math.ceil((raw["sliding_window"] - 1 + 2048) / 16) + 1
    blocks_big = math.ceil((raw["sliding_window"] - 1 + 8192) / 16) + 1
    length = 100_000
    full = math.ceil(length / 16) * 16 * (raw["num_hidden_layers"] - n_sliding) * per_layer
    assert small.request_bytes(length) == full + n_sliding * blocks * 16 * per_layer
    big = _layout(model_dir, "openai__gpt-oss-20b", batched=8192)
    assert (
        big.request_bytes(length) - small.request_bytes(length)
        == n_sliding * (blocks_big - blocks) * 16 * per_layer
    )


@pytest.mark.parametrize(("dtype", "element"), [("auto", 2), ("fp8", 1)])
def test_mla_caches_one_latent_per_token(model_dir, dtype, element) -> None:
    raw = raw_config("deepseek-ai__DeepSeek-V2-Lite")
    layout = _layout(model_dir, "deepseek-ai__DeepSeek-V2-Lite", dtype)
    latent = raw["kv_lora_rank"] + raw["qk_rope_head_dim"]
    assert layout.token_layer_bytes == latent * element  # no separate V, not per head
    assert layout.kv_bytes_per_token == raw["num_hidden_layers"] * latent * element
    dense_equivalent = (
        raw["num_hidden_layers"]
        * 2
        * raw["num_key_value_heads"]
        * (raw["qk_nope_head_dim"] + raw["qk_rope_head_dim"])
        * element
    )
    assert layout.kv_bytes_per_token * 10 < dense_equivalent


def test_longest_fitting_is_the_edge_of_fits(model_dir) -> None:
    layout = _layout(model_dir, "openai__gpt-oss-20b")
    for pool in (50 * layout.bytes_per_block, 3 * 1024**3, 10**10):
        longest = layout.longest_fitting(pool, 131_072)
        assert layout.fits(longest, pool)
        if longest < 131_072:
            assert not layout.fits(longest + 1, pool)
    assert layout.longest_fitting(layout.bytes_per_block, 131_072) == 0  # only the null block


def test_capacity_is_concurrency_times_length(model_dir) -> None:
    layout = _layout(model_dir, "Qwen__Qwen3-8B")
    pool, length = 5 * 1024**3, 8192
    blocks = pool // layout.bytes_per_block
    assert layout.max_concurrency(pool, length) == blocks / math.ceil(length / 16)
    assert layout.cache_tokens(pool, length) == int(blocks / math.ceil(length / 16) * length)


def test_unknown_cache_dtype_is_a_usage_error(model_dir) -> None:
    with pytest.raises(UsageError, match="kv-cache-dtype"):
        _layout(model_dir, "Qwen__Qwen3-8B", "int3")


def test_one_block_is_kept_back_for_the_null_block(model_dir) -> None:
    layout = _layout(model_dir, "Qwen__Qwen3-8B")
    pool = 11 * layout.bytes_per_block  # 11 blocks, one of them vLLM's null block
    assert layout.longest_fitting(pool, 40_960) == 10 * layout.block_size
    assert layout.fits(10 * 16, pool) and not layout.fits(10 * 16 + 1, pool)
