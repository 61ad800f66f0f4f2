"""Gated-DeltaNet hybrids: qwen35, qwen35moe, qwen3next.

Layout rule (llama.cpp ``load_arch_hparams``): layer ``il`` is recurrent
(linear attention, fixed-size state per sequence) unless it is one of every
``full_attention_interval`` layers, or as given by the bool array
``{arch}.attention.recurrent_layers`` when present. The current converter
writes both when the HF config has ``layer_types`` (Qwen3.5 does); the
``write_recurrent_layers`` geometry flag controls the array so both code paths
can be exercised. ``nextn_predict_layers > 0`` appends that many MTP blocks
(``block_count = n_layer + nextn``), which llama.cpp excludes from the KV cache.

SSM keys as ``Qwen3NextModel.set_gguf_parameters`` writes them:
``ssm.conv_kernel = linear_conv_kernel_dim``, ``ssm.state_size = linear_key_head_dim``,
``ssm.group_count = linear_num_key_heads``, ``ssm.time_step_rank = linear_num_value_heads``,
``ssm.inner_size = linear_value_head_dim * linear_num_value_heads``.
"""

from __future__ import annotations

from typing import Any

from .base import TINY_EXPERTS, TINY_WIDTHS, ModelWriter, T, tname
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

_GDN = {
    "ssm_conv_kernel": 4,
    "ssm_state_size": 128,
    "ssm_group_count": 16,
    "ssm_time_step_rank": 32,
    "ssm_inner_size": 4096,
}
"""The Gated-DeltaNet geometry: each name is a GGUF key (``GGUFWriter.add_<name>``), in the
order ``Qwen3NextModel`` writes them."""

_QWEN3_NEXT_ATTENTION = dict(
    n_ctx_train=262144,
    **TINY_WIDTHS,
    n_head=16,
    head_dim=256,
    full_attention_interval=4,
    nextn_predict_layers=0,
    rope_theta=10000000.0,
)
"""What Qwen3.5 and Qwen3-Next share: one full-attention layer in 4 (16 q heads of 256), no MTP."""

DEFAULTS: dict[str, dict[str, Any]] = {
    # Qwen3.5-9B: 32 layers, every 4th full attention (8 layers, 4 kv heads of 256) + 24 GDN.
    "qwen35": dict(
        n_layer=32,
        n_head_kv=4,
        write_recurrent_layers=True,
        **_QWEN3_NEXT_ATTENTION,
        **_GDN,
    ),
    # Qwen3.5-35B-A3B: 40 layers (10 attention, 2 kv heads of 256); 4 tiny experts instead of 256.
    "qwen35moe": dict(
        n_layer=40,
        n_head_kv=2,
        **TINY_EXPERTS,
        n_ff_shexp=32,
        write_recurrent_layers=True,
        **_QWEN3_NEXT_ATTENTION,
        **_GDN,
    ),
    # Qwen3-Next-80B-A3B: 48 layers (12 attention, 2 kv heads of 256); 4 tiny experts.
    "qwen3next": dict(
        n_layer=48,
        n_head_kv=2,
        **TINY_EXPERTS,
        n_ff_shexp=32,
        write_recurrent_layers=False,
        **_QWEN3_NEXT_ATTENTION,
        **_GDN,
    ),
}


def recurrent_layers(g: dict[str, Any]) -> list[bool]:
    """Per-block recurrent flags (MTP blocks are never recurrent)."""
    interval = g["full_attention_interval"]
    flags = [(il + 1) % interval != 0 for il in range(g["n_layer"])]
    return flags + [False] * g["nextn_predict_layers"]


def _keys(mw: ModelWriter, g: dict[str, Any]) -> None:
    """Qwen3NextModel (+ Qwen3.5 MRoPE sections) metadata."""
    g_all = {**g, "n_layer": g["n_layer"] + g["nextn_predict_layers"]}
    common_llm_keys(mw, g_all)
    w = mw.w
    if "n_expert" in g:
        expert_keys(mw, g)
        w.add_expert_shared_feed_forward_length(g["n_ff_shexp"])
    for key in _GDN:
        getattr(w, f"add_{key}")(g[key])
    if g["write_recurrent_layers"]:
        mw.add_array("{arch}.attention.recurrent_layers", recurrent_layers(g))
    w.add_full_attention_interval(g["full_attention_interval"])
    w.add_rope_dimension_count(g["head_dim"] // 4)  # partial_rotary_factor 0.25
    if mw.arch in ("qwen35", "qwen35moe"):
        w.add_rope_dimension_sections([11, 11, 10, 0])
    if g["nextn_predict_layers"]:
        w.add_nextn_predict_layers(g["nextn_predict_layers"])


def _gdn_layer(mw: ModelWriter, il: int, g: dict[str, Any]) -> None:
    """Linear-attention (Gated DeltaNet) tensors of block ``il``."""
    n_embd, state = g["n_embd"], g["ssm_state_size"]
    n_v_heads = g["ssm_time_step_rank"]
    key_dim, value_dim = state * g["ssm_group_count"], state * n_v_heads
    mw.matrix(tname(T.ATTN_QKV, il), n_embd, 2 * key_dim + value_dim)
    mw.matrix(tname(T.ATTN_GATE, il), n_embd, value_dim)
    mw.f32(tname(T.SSM_CONV1D, il), g["ssm_conv_kernel"], 2 * key_dim + value_dim)
    mw.f32(tname(T.SSM_DT, il, "bias"), n_v_heads, value=1.0)
    mw.f32(tname(T.SSM_A, il, None), n_v_heads, value=-1.0)
    if mw.arch == "qwen3next":
        mw.matrix(tname(T.SSM_BETA_ALPHA, il), n_embd, 2 * n_v_heads)
    else:
        mw.matrix(tname(T.SSM_BETA, il), n_embd, n_v_heads)
        mw.matrix(tname(T.SSM_ALPHA, il), n_embd, n_v_heads)
    mw.norm(T.SSM_NORM, il, state)
    mw.matrix(tname(T.SSM_OUT, il), value_dim, n_embd)


def _ffn(mw: ModelWriter, il: int, g: dict[str, Any]) -> None:
    """Dense SwiGLU (qwen35) or routed + shared experts (qwen35moe, qwen3next)."""
    if "n_expert" in g:
        moe_ffn(mw, il, g["n_embd"], g["n_ff_exp"], g["n_expert"])
        shared_expert(mw, il, g["n_embd"], g["n_ff_shexp"], gate_inp=True)
    else:
        dense_ffn(mw, il, g["n_embd"], g["n_ff"])


def build_gdn(mw: ModelWriter, g: dict[str, Any]) -> None:
    """Write qwen35 / qwen35moe / qwen3next keys and tensors."""
    _keys(mw, g)
    n_embd = g["n_embd"]
    embeddings(mw, n_embd)
    for il, recurrent in enumerate(recurrent_layers(g)):
        mw.norm(T.ATTN_NORM, il, n_embd)
        mw.norm(T.ATTN_POST_NORM, il, n_embd)
        if recurrent:
            _gdn_layer(mw, il, g)
        else:  # gated attention: q projection carries the output gate too
            head_attention(mw, il, g, qk_norm=True, output_gate=True)
        _ffn(mw, il, g)
        if il >= g["n_layer"]:
            nextn_block(mw, il, n_embd)


BUILDERS = {"qwen35": build_gdn, "qwen35moe": build_gdn, "qwen3next": build_gdn}
