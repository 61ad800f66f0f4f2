"""Interleaved sliding-window attention (iSWA): gemma2, gemma3, gpt-oss.

None of these converters writes ``sliding_window_pattern``: llama.cpp applies
its per-arch default (gemma2 2, gemma3 6, gpt-oss 2; the last layer of each
group is full attention). A ``sliding_window_pattern`` override (int or list of
bools) writes the key, as newer converters of other archs do.
"""

from __future__ import annotations

from typing import Any

import gguf

from .base import TINY_EXPERTS, TINY_WIDTHS, ModelWriter, T, tname
from .blocks import common_llm_keys, dense_ffn, embeddings, head_attention, moe_ffn

_GEMMA_HEADS = {"n_head": 16, "n_head_kv": 8, "head_dim": 256}

DEFAULTS: dict[str, dict[str, Any]] = {
    # Gemma-2-9B: 42 layers, 16 q heads, 8 kv heads of 256, window 4096, pattern 2.
    "gemma2": {
        "n_layer": 42,
        "n_ctx_train": 8192,
        **TINY_WIDTHS,
        **_GEMMA_HEADS,
        "sliding_window": 4096,
        "sliding_window_pattern": None,
        "rope_theta": None,  # Gemma2Model writes no rope.freq_base (llama.cpp default 10000)
    },
    # Gemma-3-12B: 48 layers, 16 q heads, 8 kv heads of 256, window 1024, pattern 6.
    "gemma3": {
        "n_layer": 48,
        "n_ctx_train": 131072,
        **TINY_WIDTHS,
        **_GEMMA_HEADS,
        "sliding_window": 1024,
        "sliding_window_pattern": None,
        "rope_theta": 1000000.0,
        "rope_scaling_factor": 8.0,
    },
    # gpt-oss-20b: 24 layers, 64 q heads, 8 kv heads of 64, window 128, pattern 2;
    # 4 tiny experts instead of 32.
    "gpt-oss": {
        "n_layer": 24,
        "n_ctx_train": 131072,
        "n_embd": 32,
        "n_head": 64,
        "n_head_kv": 8,
        "head_dim": 64,
        "n_ff": 32,
        **TINY_EXPERTS,
        "sliding_window": 128,
        "sliding_window_pattern": None,
        "rope_theta": 150000.0,
        "rope_yarn_factor": 32.0,
        "rope_yarn_orig_ctx": 4096,
    },
}


def _swa_keys(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``sliding_window`` (+ the pattern key only when asked for)."""
    mw.w.add_sliding_window(g["sliding_window"])
    if g["sliding_window_pattern"] is not None:
        mw.w.add_sliding_window_pattern(g["sliding_window_pattern"])


def _gemma_blocks(mw: ModelWriter, g: dict[str, Any], *, qk_norm: bool) -> None:
    """Gemma 2/3 blocks: pre/post norms around attention and FFN, tied output."""
    n_embd = g["n_embd"]
    embeddings(mw, n_embd, tied=True)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        head_attention(mw, il, g, qk_norm=qk_norm)
        mw.norm(T.ATTN_POST_NORM, il, n_embd)
        mw.norm(T.FFN_NORM, il, n_embd)
        dense_ffn(mw, il, n_embd, g["n_ff"])
        mw.norm(T.FFN_POST_NORM, il, n_embd)


def build_gemma2(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Gemma2Model``: explicit keys incl. soft-capping and sliding_window."""
    common_llm_keys(mw, g)
    mw.w.add_attn_logit_softcapping(50.0)
    mw.w.add_final_logit_softcapping(30.0)
    _swa_keys(mw, g)
    _gemma_blocks(mw, g, qk_norm=False)


def build_gemma3(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Gemma3Model``: base keys + key/value_length 256 + sliding_window (+ linear rope)."""
    common_llm_keys(mw, g)
    if g["rope_scaling_factor"]:
        mw.w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        mw.w.add_rope_scaling_factor(g["rope_scaling_factor"])
    _swa_keys(mw, g)
    _gemma_blocks(mw, g, qk_norm=True)


def build_gpt_oss(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``GptOssModel``: base keys + YaRN + sliding_window + expert_feed_forward_length."""
    common_llm_keys(mw, g)
    mw.w.add_expert_count(g["n_expert"])
    mw.w.add_expert_used_count(g["n_expert_used"])
    mw.w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    mw.w.add_rope_scaling_factor(g["rope_yarn_factor"])
    mw.w.add_rope_scaling_orig_ctx_len(g["rope_yarn_orig_ctx"])
    _swa_keys(mw, g)
    mw.w.add_expert_feed_forward_length(g["n_ff_exp"])
    n_embd = g["n_embd"]
    embeddings(mw, n_embd)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        mw.norm(T.ATTN_POST_NORM, il, n_embd)
        head_attention(mw, il, g, qkv_bias=True)
        mw.f32(tname(T.ATTN_OUT, il, "bias"), n_embd)
        mw.f32(tname(T.ATTN_SINKS, il), g["n_head"])
        moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"], biases=True)


BUILDERS = {
    "gemma2": build_gemma2,
    "gemma3": build_gemma3,
    "gpt-oss": build_gpt_oss,
}
