"""The published geometry of each shipped preset's model, as GGUF metadata.

Values come from each model's ``config.json`` turned into the keys llama.cpp's
converter writes (layers, KV heads, head sizes, hybrid layout, sliding window).
No tensors: these headers size the KV cache, not the weights. The presets' comments
quote the q8_0 KV bytes per token; ``test_presets_maths.py`` recomputes them from
these headers with homelab's own KV arithmetic, so a comment cannot drift from the
architecture rules.
"""

from __future__ import annotations

from typing import Any

from metadata_headers import header, seed_qwen35

from homelab.gguf.header import GgufHeader

_NEMOTRON_NANO_9B_V2 = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
"""hybrid_override_pattern: M = Mamba2, * = attention, - = MLP (27 / 4 / 25 of 56)."""


def _header(arch: str, vocab: int, **keys: Any) -> GgufHeader:
    return header(arch, vocab=vocab, **keys)


def _gdn(inner: int, time_step_rank: int) -> dict[str, int]:
    """Gated DeltaNet keys of Qwen3.5/3.6 (linear_key_head_dim 128, 16 key heads)."""
    return {
        "ssm__conv_kernel": 4,
        "ssm__state_size": 128,
        "ssm__group_count": 16,
        "ssm__time_step_rank": time_step_rank,
        "ssm__inner_size": inner,
    }


def qwen35_9b() -> GgufHeader:
    """Qwen3.5-9B is the seed article's model (tests/plan/metadata_headers.py)."""
    return seed_qwen35()


def qwen36_27b() -> GgufHeader:
    return _header(
        "qwen35",
        248_320,
        block_count=64,
        context_length=262_144,
        embedding_length=5120,
        feed_forward_length=17_408,
        attention__head_count=24,
        attention__head_count_kv=4,
        attention__key_length=256,
        attention__value_length=256,
        full_attention_interval=4,
        **_gdn(6144, 48),
    )


def qwen36_35b_a3b() -> GgufHeader:
    return _header(
        "qwen35moe",
        248_320,
        block_count=40,
        context_length=262_144,
        embedding_length=2048,
        attention__head_count=16,
        attention__head_count_kv=2,
        attention__key_length=256,
        attention__value_length=256,
        full_attention_interval=4,
        expert_count=256,
        expert_used_count=8,
        expert_feed_forward_length=512,
        expert_shared_feed_forward_length=512,
        **_gdn(4096, 32),
    )


def qwen3_8b() -> GgufHeader:
    return _header(
        "qwen3",
        151_936,
        block_count=36,
        context_length=40_960,
        embedding_length=4096,
        feed_forward_length=12_288,
        attention__head_count=32,
        attention__head_count_kv=8,
        attention__key_length=128,
        attention__value_length=128,
    )


def gpt_oss_20b() -> GgufHeader:
    return _header(
        "gpt-oss",
        201_088,
        block_count=24,
        context_length=131_072,
        embedding_length=2880,
        feed_forward_length=2880,
        attention__head_count=64,
        attention__head_count_kv=8,
        attention__key_length=64,
        attention__value_length=64,
        attention__sliding_window=128,
        expert_count=32,
        expert_used_count=4,
        expert_feed_forward_length=2880,
    )


def gpt_oss_120b() -> GgufHeader:
    """openai/gpt-oss-120b's config.json: 36 layers, 128 experts, the 20B's attention."""
    return _header(
        "gpt-oss",
        201_088,
        block_count=36,
        context_length=131_072,
        embedding_length=2880,
        feed_forward_length=2880,
        attention__head_count=64,
        attention__head_count_kv=8,
        attention__key_length=64,
        attention__value_length=64,
        attention__sliding_window=128,
        expert_count=128,
        expert_used_count=4,
        expert_feed_forward_length=2880,
    )


def qwen3_30b_a3b() -> GgufHeader:
    """Qwen/Qwen3-30B-A3B-Instruct-2507's config.json: 48 layers, 4 KV heads of 128."""
    return _header(
        "qwen3moe",
        151_936,
        block_count=48,
        context_length=262_144,
        embedding_length=2048,
        feed_forward_length=6144,
        attention__head_count=32,
        attention__head_count_kv=4,
        attention__key_length=128,
        attention__value_length=128,
        expert_count=128,
        expert_used_count=8,
        expert_feed_forward_length=768,
    )


def gemma3_12b() -> GgufHeader:
    return _header(
        "gemma3",
        262_208,
        block_count=48,
        context_length=131_072,
        embedding_length=3840,
        feed_forward_length=15_360,
        attention__head_count=16,
        attention__head_count_kv=8,
        attention__key_length=256,
        attention__value_length=256,
        attention__sliding_window=1024,
    )


def mistral_small_32_24b() -> GgufHeader:
    return _header(
        "llama",
        131_072,
        block_count=40,
        context_length=131_072,
        embedding_length=5120,
        feed_forward_length=32_768,
        attention__head_count=32,
        attention__head_count_kv=8,
        attention__key_length=128,
        attention__value_length=128,
    )


def granite4_h_small() -> GgufHeader:
    attention = {5, 15, 25, 35}
    return _header(
        "granitehybrid",
        100_352,
        block_count=40,
        context_length=131_072,
        embedding_length=4096,
        feed_forward_length=0,
        attention__head_count=32,
        attention__head_count_kv=[8 if il in attention else 0 for il in range(40)],
        attention__key_length=128,
        attention__value_length=128,
        ssm__conv_kernel=4,
        ssm__inner_size=8192,
        ssm__state_size=128,
        ssm__group_count=1,
        ssm__time_step_rank=128,
        expert_count=72,
        expert_used_count=10,
        expert_feed_forward_length=768,
        expert_shared_feed_forward_length=1024,
    )


def nemotron_nano_9b_v2() -> GgufHeader:
    pattern = _NEMOTRON_NANO_9B_V2
    return _header(
        "nemotron_h",
        131_072,
        block_count=56,
        context_length=131_072,
        embedding_length=4480,
        attention__head_count=40,
        attention__head_count_kv=[8 if c == "*" else 0 for c in pattern],
        feed_forward_length=[15_680 if c == "-" else 0 for c in pattern],
        attention__key_length=128,
        attention__value_length=128,
        ssm__conv_kernel=4,
        ssm__inner_size=10_240,
        ssm__state_size=128,
        ssm__group_count=8,
        ssm__time_step_rank=128,
    )


def glm47_flash() -> GgufHeader:
    return _header(
        "deepseek2",
        154_880,
        block_count=47,
        context_length=202_752,
        embedding_length=2048,
        feed_forward_length=10_240,
        attention__head_count=20,
        attention__head_count_kv=1,
        attention__key_length=576,
        attention__value_length=512,
        attention__key_length_mla=256,
        attention__value_length_mla=256,
        attention__kv_lora_rank=512,
        expert_count=64,
        expert_used_count=4,
        expert_feed_forward_length=1536,
        leading_dense_block_count=1,
    )


def lfm2_8b_a1b() -> GgufHeader:
    attention = {2, 6, 10, 14, 18, 21}
    return _header(
        "lfm2moe",
        65_536,
        block_count=24,
        context_length=32_768,
        embedding_length=2048,
        feed_forward_length=7168,
        attention__head_count=32,
        attention__head_count_kv=[8 if il in attention else 0 for il in range(24)],
        shortconv__l_cache=3,
        expert_count=32,
        expert_used_count=4,
        expert_feed_forward_length=1792,
        leading_dense_block_count=2,
    )


GEOMETRY = {
    "qwen3.5-9b": qwen35_9b,
    "qwen3.6-27b": qwen36_27b,
    "qwen3.6-35b-a3b": qwen36_35b_a3b,
    "qwen3-8b": qwen3_8b,
    "gpt-oss-20b": gpt_oss_20b,
    "gpt-oss-120b": gpt_oss_120b,
    "qwen3-30b-a3b": qwen3_30b_a3b,
    "gemma-3-12b": gemma3_12b,
    "mistral-small-3.2-24b": mistral_small_32_24b,
    "granite-4.0-h-small": granite4_h_small,
    "nemotron-nano-9b-v2": nemotron_nano_9b_v2,
    "glm-4.7-flash": glm47_flash,
    "lfm2-8b-a1b": lfm2_8b_a1b,
}
"""Preset key -> the header of its model's geometry."""
