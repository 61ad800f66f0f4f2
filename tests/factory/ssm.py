"""Per-layer hybrids: granitehybrid, nemotron_h(_moe) (Mamba2), lfm2(moe) (short convolution).

The layout is carried by per-layer arrays, as the converters write them:

- granitehybrid: ``head_count_kv[il] == 0`` marks a Mamba2 layer.
- nemotron_h(_moe): Mamba2 iff ``head_count_kv[il] == 0 and feed_forward_length[il] == 0``,
  attention iff ``head_count_kv[il] > 0`` (and ff 0), MLP/MoE-only iff
  ``feed_forward_length[il] > 0`` (nemotron_h_moe: the converter writes ``moe_intermediate_size``
  there).
- lfm2(moe): ``head_count_kv[il] == 0`` marks a short-convolution layer
  (state ``n_embd * (shortconv.l_cache - 1)`` floats per sequence).

The attention KV geometry is real; the recurrent state is scaled down with
``n_embd`` where llama.cpp ties them (granitehybrid asserts ``d_inner == 2 *
n_embd``; lfm2(moe)'s conv state is ``n_embd`` wide), and nemotron_h's Mamba2 heads
are cut from 128 to 16 (nemotron_h_moe keeps its real 64 heads of 64).
"""

from __future__ import annotations

from typing import Any

import gguf

from .base import GQA_32_8_128, TINY_EXPERTS, TINY_WIDTHS, ModelWriter, T, tname
from .blocks import attention, common_llm_keys, dense_ffn, embeddings, head_attention, moe_ffn

# Nemotron-H-8B: M = Mamba2, * = attention, - = MLP (52 blocks, 4 attention).
NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
# Nemotron-3-Nano-30B-A3B: M = Mamba2, * = attention, E = MoE (52 blocks: 23 M, 23 E, 6 attention).
NEMOTRON_3_NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"

DEFAULTS: dict[str, dict[str, Any]] = {
    # Granite-4.0-H style: 40 blocks, attention (8 kv heads of 128) at 5, 15, 25, 35.
    "granitehybrid": {
        "n_layer": 40,
        "n_ctx_train": 1048576,
        "n_embd": 64,
        **GQA_32_8_128,
        "n_ff": 64,
        "attention_layers": (5, 15, 25, 35),
        "ssm_conv_kernel": 4,
        "ssm_state_size": 128,
        "ssm_group_count": 1,
        "ssm_head_dim": 64,
    },
    # Nemotron-H-8B: 52 blocks per NEMOTRON_H_8B_PATTERN, attention 8 kv heads of 128;
    # Mamba2 with 16 heads of 64 (real: 128), 8 groups, state 128.
    "nemotron_h": {
        "n_ctx_train": 8192,
        **TINY_WIDTHS,
        **GQA_32_8_128,
        "pattern": NEMOTRON_H_8B_PATTERN,
        "ssm_conv_kernel": 4,
        "ssm_state_size": 128,
        "ssm_group_count": 8,
        "ssm_heads": 16,
        "ssm_head_dim": 64,
    },
    # Nemotron-3-Nano-30B-A3B: 52 blocks per NEMOTRON_3_NANO_PATTERN, attention 2 kv heads of 128;
    # Mamba2 with 64 heads of 64, 8 groups, state 128 (all real); 4 tiny experts instead of 128.
    "nemotron_h_moe": {
        "n_ctx_train": 262144,
        **TINY_WIDTHS,
        **GQA_32_8_128,
        "n_head_kv": 2,
        "pattern": NEMOTRON_3_NANO_PATTERN,
        "ssm_conv_kernel": 4,
        "ssm_state_size": 128,
        "ssm_group_count": 8,
        "ssm_heads": 64,
        "ssm_head_dim": 64,
        **TINY_EXPERTS,
        "n_ff_shexp": 64,
    },
    # LFM2-1.2B: 16 blocks, attention (8 kv heads of 64) at 2,5,8,10,12,14, l_cache 3;
    # n_embd cut from 2048 to 512 (q width = n_embd = n_head * head_dim).
    "lfm2": {
        "n_layer": 16,
        "n_ctx_train": 128000,
        "n_head": 8,
        "n_head_kv": 8,
        "head_dim": 64,
        "n_ff": 64,
        "attention_layers": (2, 5, 8, 10, 12, 14),
        "shortconv_l_cache": 3,
    },
    # LFM2-8B-A1B: 24 blocks, attention (8 kv heads of 64) at 2,6,10,14,18,21, l_cache 3,
    # 2 leading dense blocks; n_embd cut from 2048 to 512 (q width = n_embd = n_head * head_dim,
    # so 32 q heads become 8), 4 tiny experts instead of 32.
    "lfm2moe": {
        "n_layer": 24,
        "n_ctx_train": 128000,
        "n_head": 8,
        "n_head_kv": 8,
        "head_dim": 64,
        "n_ff": 64,
        **TINY_EXPERTS,
        "leading_dense_blocks": 2,
        "attention_layers": (2, 6, 10, 14, 18, 21),
        "shortconv_l_cache": 3,
    },
}


def _mamba2_layer(
    mw: ModelWriter, il: int, n_embd: int, d_inner: int, n_heads: int, g: dict[str, Any]
) -> None:
    """Mamba2 mixer tensors of block ``il``."""
    n_group, d_state = g["ssm_group_count"], g["ssm_state_size"]
    conv_dim = d_inner + 2 * n_group * d_state
    mw.matrix(tname(T.SSM_IN, il), n_embd, 2 * d_inner + 2 * n_group * d_state + n_heads)
    mw.f32(tname(T.SSM_CONV1D, il), g["ssm_conv_kernel"], conv_dim)
    mw.f32(tname(T.SSM_CONV1D, il, "bias"), conv_dim)
    mw.f32(tname(T.SSM_DT, il, "bias"), n_heads, value=1.0)
    mw.f32(tname(T.SSM_A, il, None), 1, n_heads, value=-1.0)
    mw.f32(tname(T.SSM_D, il, None), 1, n_heads, value=1.0)
    mw.f32(tname(T.SSM_NORM, il), d_inner // n_group, n_group, value=1.0)
    mw.matrix(tname(T.SSM_OUT, il), d_inner, n_embd)


def _ssm_keys(mw: ModelWriter, g: dict[str, Any], d_inner: int, n_heads: int) -> None:
    """Mamba2 keys as GraniteHybridModel writes them (time_step_rank = n heads)."""
    w = mw.w
    w.add_ssm_conv_kernel(g["ssm_conv_kernel"])
    w.add_ssm_state_size(g["ssm_state_size"])
    w.add_ssm_group_count(g["ssm_group_count"])
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_time_step_rank(n_heads)


def build_granitehybrid(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``GraniteHybridModel``: per-layer head_count_kv (0 = Mamba2), no RoPE."""
    n_embd, hd = g["n_embd"], g["head_dim"]
    d_inner = 2 * n_embd
    n_heads = d_inner // g["ssm_head_dim"]
    attn = set(g["attention_layers"])
    kv = [g["n_head_kv"] if il in attn else 0 for il in range(g["n_layer"])]
    common_llm_keys(mw, {**g, "n_head_kv": kv})
    mw.w.add_vocab_size(mw.n_vocab)
    mw.w.add_rope_dimension_count(hd)
    _ssm_keys(mw, g, d_inner, n_heads)
    mw.w.add_rope_scaling_finetuned(False)
    embeddings(mw, n_embd)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        if il in attn:
            head_attention(mw, il, g)
        else:
            _mamba2_layer(mw, il, n_embd, d_inner, n_heads, g)
        mw.norm(T.FFN_NORM, il, n_embd)
        dense_ffn(mw, il, n_embd, g["n_ff"])


def _nemotron_moe_keys(mw: ModelWriter, g: dict[str, Any]) -> None:
    """The MoE keys ``NemotronHModel`` adds when the config has ``num_experts_per_tok``."""
    w = mw.w
    w.add_expert_used_count(g["n_expert_used"])
    w.add_expert_feed_forward_length(g["n_ff_exp"])
    w.add_expert_shared_feed_forward_length(g["n_ff_shexp"])
    w.add_expert_count(g["n_expert"])
    w.add_expert_shared_count(1)
    w.add_expert_weights_norm(True)
    w.add_expert_weights_scale(2.5)
    w.add_expert_group_count(1)


def _nemotron_moe_ffn(mw: ModelWriter, il: int, g: dict[str, Any]) -> None:
    """Routed experts (up/down only, router bias) + ungated shared expert of block ``il``."""
    n_embd = g["n_embd"]
    moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"], gate=False)
    mw.f32(tname(T.FFN_EXP_PROBS_B, il, "bias"), g["n_expert"])
    mw.matrix(tname(T.FFN_UP_SHEXP, il), n_embd, g["n_ff_shexp"])
    mw.matrix(tname(T.FFN_DOWN_SHEXP, il), g["n_ff_shexp"], n_embd)


def build_nemotron_h(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``NemotronHModel``: per-layer head_count_kv and feed_forward_length arrays.

    nemotron_h_moe (pattern letter ``E`` instead of ``-``) writes ``moe_intermediate_size``
    into ``feed_forward_length`` of the MoE blocks, plus the expert keys.
    """
    pattern, n_embd = g["pattern"], g["n_embd"]
    moe = "n_expert" in g
    ffn_letter = "E" if moe else "-"
    if set(pattern) - set("M*" + ffn_letter):
        raise ValueError(
            f"{mw.arch} pattern may only contain 'M', '*', {ffn_letter!r}: {pattern!r}"
        )
    kv = [g["n_head_kv"] if c == "*" else 0 for c in pattern]
    ff = [(g["n_ff_exp"] if moe else g["n_ff"]) if c == ffn_letter else 0 for c in pattern]
    d_inner = g["ssm_heads"] * g["ssm_head_dim"]
    common_llm_keys(mw, {**g, "n_layer": len(pattern), "n_head_kv": kv, "n_ff": ff})
    mw.w.add_layer_norm_eps(1e-5)
    _ssm_keys(mw, g, d_inner, g["ssm_heads"])
    mw.w.add_rope_scaling_finetuned(False)
    if moe:
        _nemotron_moe_keys(mw, g)
    embeddings(mw, n_embd)
    for il, kind in enumerate(pattern):
        mw.norm(T.ATTN_NORM, il, n_embd)
        if kind == "M":
            _mamba2_layer(mw, il, n_embd, d_inner, g["ssm_heads"], g)
        elif kind == "*":
            head_attention(mw, il, g)
        elif moe:
            _nemotron_moe_ffn(mw, il, g)
        else:
            dense_ffn(mw, il, n_embd, ff[il], gate=False)


def build_lfm2(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``LFM2Model`` / ``LFM2MoeModel``: head_count_kv array (0 = conv layer) + shortconv.l_cache.

    lfm2moe adds the expert keys, ``leading_dense_block_count`` and a sigmoid gating func;
    blocks past the dense lead carry routed experts with a router bias.
    """
    n_embd = g["n_head"] * g["head_dim"]
    moe = "n_expert" in g
    attn = set(g["attention_layers"])
    kv = [g["n_head_kv"] if il in attn else 0 for il in range(g["n_layer"])]
    common_llm_keys(mw, {**g, "n_embd": n_embd, "n_head_kv": kv}, head_dims=False)
    if moe:
        mw.w.add_expert_count(g["n_expert"])
        mw.w.add_expert_used_count(g["n_expert_used"])
        mw.w.add_expert_feed_forward_length(g["n_ff_exp"])
        mw.w.add_leading_dense_block_count(g["leading_dense_blocks"])
        mw.w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    mw.w.add_vocab_size(mw.n_vocab)
    mw.w.add_shortconv_l_cache(g["shortconv_l_cache"])
    embeddings(mw, n_embd, tied=True, output_norm=T.TOKEN_EMBD_NORM)
    gqa = g["n_head_kv"] * g["head_dim"]
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        if il in attn:
            attention(mw, il, n_embd, q_dim=n_embd, k_dim=gqa, v_dim=gqa, qk_norm=g["head_dim"])
        else:
            mw.f32(tname(T.SHORTCONV_CONV, il), g["shortconv_l_cache"], n_embd)
            mw.matrix(tname(T.SHORTCONV_INPROJ, il), n_embd, 3 * n_embd)
            mw.matrix(tname(T.SHORTCONV_OUTPROJ, il), n_embd, n_embd)
        mw.norm(T.FFN_NORM, il, n_embd)
        if moe and il >= g["leading_dense_blocks"]:
            moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"])
            mw.f32(tname(T.FFN_EXP_PROBS_B, il, "bias"), g["n_expert"])
        else:
            dense_ffn(mw, il, n_embd, g["n_ff"])


BUILDERS = {
    "granitehybrid": build_granitehybrid,
    "nemotron_h": build_nemotron_h,
    "lfm2": build_lfm2,
    "nemotron_h_moe": build_nemotron_h,
    "lfm2moe": build_lfm2,
}
