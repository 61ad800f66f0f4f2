"""Full-attention mixture-of-experts decoders: qwen2moe, glm4moe.

Both keep a plain KV cache on every main-model layer. glm4moe appends
``nextn_predict_layers`` NextN/MTP blocks (``block_count = n_layer + nextn``, as
``Glm4MoeModel`` writes it unless converted with ``--no-mtp``); llama.cpp loads
them but leaves them out of the main context's KV cache (``create_memory``
filters ``il < n_layer()`` whenever ``n_layer_nextn > 0``).
"""

from __future__ import annotations

from typing import Any

import gguf

from .base import TINY_EXPERTS, ModelWriter, T, tname
from .blocks import (
    common_llm_keys,
    dense_ffn,
    embeddings,
    expert_keys,
    head_attention,
    moe_ffn,
    nextn_block,
    shared_expert,
)

DEFAULTS: dict[str, dict[str, Any]] = {
    # Qwen2-57B-A14B: 28 layers, 4 kv heads of 128 (no head_dim key: 128 = n_embd / n_head);
    # query heads cut from 28 to 4 (n_embd = n_head * 128), 4 tiny experts instead of 64.
    "qwen2moe": {
        "n_layer": 28,
        "n_ctx_train": 32768,
        "n_head": 4,
        "n_head_kv": 4,
        "head_dim": 128,
        "n_ff": 64,
        **TINY_EXPERTS,
        "n_ff_shexp": 64,
        "rope_theta": 1000000.0,
    },
    # GLM-4.5-Air: 46 layers + 1 NextN block, 8 kv heads of 128 (head_dim in the config);
    # query heads cut from 96 to 8, 1 leading dense block, 4 tiny routed experts (real: 128)
    # plus 1 shared.
    "glm4moe": {
        "n_layer": 46,
        "nextn_predict_layers": 1,
        "n_ctx_train": 131072,
        "n_embd": 32,
        "n_head": 8,
        "n_head_kv": 8,
        "head_dim": 128,
        "n_ff": 64,
        **TINY_EXPERTS,
        "n_expert_shared": 1,
        "leading_dense_blocks": 1,
        "rope_theta": 1000000.0,
    },
}


def build_qwen2moe(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Qwen2MoeModel``: base keys (no key_length), expert counts and widths, qkv bias,
    routed experts plus a gated shared expert on every block."""
    g["n_embd"] = n_embd = g["n_head"] * g["head_dim"]
    common_llm_keys(mw, g, head_dims=False)
    expert_keys(mw, g)
    mw.w.add_expert_shared_feed_forward_length(g["n_ff_shexp"])
    embeddings(mw, n_embd)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        head_attention(mw, il, g, qkv_bias=True)
        mw.norm(T.FFN_NORM, il, n_embd)
        moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"])
        shared_expert(mw, il, n_embd, g["n_ff_shexp"], gate_inp=True)


def _glm4moe_keys(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``Glm4MoeModel.set_gguf_parameters`` (block_count includes the NextN blocks)."""
    w = mw.w
    common_llm_keys(mw, {**g, "n_layer": g["n_layer"] + g["nextn_predict_layers"]})
    w.add_expert_used_count(g["n_expert_used"])
    w.add_rope_dimension_count(g["head_dim"] // 2)  # partial_rotary_factor 0.5
    w.add_expert_count(g["n_expert"])
    w.add_expert_feed_forward_length(g["n_ff_exp"])
    w.add_expert_shared_count(g["n_expert_shared"])
    w.add_leading_dense_block_count(g["leading_dense_blocks"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    if g["nextn_predict_layers"]:
        w.add_nextn_predict_layers(g["nextn_predict_layers"])


def build_glm4moe(mw: ModelWriter, g: dict[str, Any]) -> None:
    """GLM-4.5 blocks: biased q/k/v, post-attention norm before the FFN (no ffn_norm),
    dense lead then sigmoid-routed experts + shared experts; NextN fusion on the last blocks."""
    _glm4moe_keys(mw, g)
    n_embd = g["n_embd"]
    embeddings(mw, n_embd)
    for il in range(g["n_layer"] + g["nextn_predict_layers"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        head_attention(mw, il, g, qkv_bias=True)
        mw.norm(T.ATTN_POST_NORM, il, n_embd)
        if il < g["leading_dense_blocks"]:
            dense_ffn(mw, il, n_embd, g["n_ff"])
        else:
            moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"])
            mw.f32(tname(T.FFN_EXP_PROBS_B, il, "bias"), g["n_expert"])
            n_ff_shexp = g["n_ff_exp"] * g["n_expert_shared"]
            shared_expert(mw, il, n_embd, n_ff_shexp)
        if il >= g["n_layer"]:
            nextn_block(mw, il, n_embd)


BUILDERS = {"qwen2moe": build_qwen2moe, "glm4moe": build_glm4moe}
