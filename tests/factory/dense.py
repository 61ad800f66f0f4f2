"""Plain full-attention decoders: llama, mistral3, qwen2, qwen3, qwen3moe, phi3.

Defaults keep the KV-relevant geometry of a real model (layers, KV heads, head
dims, context length) and shrink everything else (n_embd, n_ff, experts,
vocab). Where the architecture ties the query width to ``n_embd`` (qwen2, phi3)
the number of query heads is reduced instead; that does not change the KV cache.
"""

from __future__ import annotations

from typing import Any

from .base import GQA_32_8_128, TINY_EXPERTS, TINY_WIDTHS, ModelWriter, T, tname
from .blocks import common_llm_keys, dense_ffn, embeddings, expert_keys, head_attention, moe_ffn

DEFAULTS: dict[str, dict[str, Any]] = {
    # Llama-3.1-8B attention: 32 layers, 32 q heads, 8 kv heads of 128.
    "llama": {
        "n_layer": 32,
        "n_ctx_train": 131072,
        **TINY_WIDTHS,
        **GQA_32_8_128,
        "rope_theta": 500000.0,
    },
    # Mistral-Small-3.1-24B text model: 40 layers, 32 q heads, 8 kv heads of 128.
    "mistral3": {
        "n_layer": 40,
        "n_ctx_train": 131072,
        **TINY_WIDTHS,
        **GQA_32_8_128,
        "rope_theta": 1000000000.0,
    },
    # Qwen2.5-0.5B: 24 layers, 2 kv heads of 64 (query heads cut from 14 to 2: n_embd = n_head*64).
    "qwen2": {
        "n_layer": 24,
        "n_ctx_train": 32768,
        "n_head": 2,
        "n_head_kv": 2,
        "head_dim": 64,
        "n_ff": 64,
        "rope_theta": 1000000.0,
    },
    # Qwen3-8B: 36 layers, 32 q heads, 8 kv heads of 128.
    "qwen3": {
        "n_layer": 36,
        "n_ctx_train": 40960,
        **TINY_WIDTHS,
        **GQA_32_8_128,
        "rope_theta": 1000000.0,
    },
    # Qwen3-30B-A3B: 48 layers, 32 q heads, 4 kv heads of 128; 4 tiny experts instead of 128.
    "qwen3moe": {
        "n_layer": 48,
        "n_ctx_train": 40960,
        **TINY_WIDTHS,
        **GQA_32_8_128,
        "n_head_kv": 4,
        **TINY_EXPERTS,
        "rope_theta": 1000000.0,
    },
    # Phi-3-mini-4k: 32 layers, head dim 96, sliding_window 2047 (ignored by llama.cpp);
    # kv heads cut from 32 to 2 because n_embd = n_head * head_dim and n_head_kv == n_head.
    "phi3": {
        "n_layer": 32,
        "n_ctx_train": 4096,
        "n_head": 2,
        "n_head_kv": 2,
        "head_dim": 96,
        "n_ff": 64,
        "sliding_window": 2047,
        "rope_theta": 10000.0,
    },
}


def _llama_like(
    mw: ModelWriter,
    g: dict[str, Any],
    *,
    qk_norm: bool = False,
    qkv_bias: bool = False,
    moe: bool = False,
) -> None:
    """Blocks of llama / mistral3 / qwen2 / qwen3 / qwen3moe (q width = n_head * head_dim)."""
    n_embd = g["n_embd"]
    embeddings(mw, n_embd)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        head_attention(mw, il, g, qk_norm=qk_norm, qkv_bias=qkv_bias)
        mw.norm(T.FFN_NORM, il, n_embd)
        if moe:
            moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"])
        else:
            dense_ffn(mw, il, n_embd, g["n_ff"])


def build_llama(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``LlamaModel``: base keys + vocab_size + rope.dimension_count (= head_dim)."""
    common_llm_keys(mw, g)
    mw.w.add_vocab_size(mw.n_vocab)
    mw.w.add_rope_dimension_count(g["head_dim"])
    _llama_like(mw, g)


build_mistral3 = build_llama  # Ministral3Model(LlamaModel) writes the same keys here.


def build_qwen3(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Qwen3Model``: base keys (key/value_length from head_dim), q/k norms."""
    common_llm_keys(mw, g)
    _llama_like(mw, g, qk_norm=True)


def build_qwen3moe(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Qwen3MoeModel``: qwen3 keys + expert counts + expert_feed_forward_length."""
    common_llm_keys(mw, g)
    expert_keys(mw, g)
    _llama_like(mw, g, qk_norm=True, moe=True)


def _square_attention_geometry(g: dict[str, Any]) -> int:
    """n_embd for archs whose q projection is n_embd wide (qwen2, phi3)."""
    return g["n_head"] * g["head_dim"]


def build_qwen2(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Qwen2Model``: base keys without key_length (no head_dim in config), qkv bias."""
    g["n_embd"] = _square_attention_geometry(g)
    common_llm_keys(mw, g, head_dims=False)
    _llama_like(mw, g, qkv_bias=True)


def build_phi3(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Phi3MiniModel``: fused attn_qkv, up = 2*n_ff, sliding_window written (ignored)."""
    g["n_embd"] = _square_attention_geometry(g)
    n_embd = g["n_embd"]
    w = mw.w
    w.add_context_length(g["n_ctx_train"])
    w.add_rope_scaling_orig_ctx_len(g["n_ctx_train"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(g["n_ff"])
    w.add_block_count(g["n_layer"])
    w.add_head_count(g["n_head"])
    w.add_head_count_kv(g["n_head_kv"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(g["head_dim"])
    w.add_rope_freq_base(float(g["rope_theta"]))
    w.add_sliding_window(g["sliding_window"])
    embeddings(mw, n_embd)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        head_attention(mw, il, g, fused_qkv=True)
        mw.norm(T.FFN_NORM, il, n_embd)
        mw.matrix(tname(T.FFN_UP, il), n_embd, 2 * g["n_ff"])
        mw.matrix(tname(T.FFN_DOWN, il), g["n_ff"], n_embd)


BUILDERS = {
    "llama": build_llama,
    "mistral3": build_mistral3,
    "qwen2": build_qwen2,
    "qwen3": build_qwen3,
    "qwen3moe": build_qwen3moe,
    "phi3": build_phi3,
}
