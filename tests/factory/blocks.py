"""Tensor groups shared by several architectures (embeddings, attention, FFN, MoE).

Each helper mirrors one group of ``create_tensor`` calls in llama.cpp's
``src/models/<arch>.cpp`` so the loader finds every required tensor with the
shape it expects. Dimensions are ggml ``ne`` order.
"""

from __future__ import annotations

from typing import Any

from .base import ModelWriter, T, tname


def common_llm_keys(mw: ModelWriter, g: dict[str, Any], *, head_dims: bool = True) -> None:
    """Keys ``TextModel.set_gguf_parameters`` writes for a plain decoder.

    ``head_dims`` writes ``key_length``/``value_length`` (the converter does so
    whenever the HF config has ``head_dim``).
    """
    w = mw.w
    w.add_block_count(g["n_layer"])
    w.add_context_length(g["n_ctx_train"])
    w.add_embedding_length(g["n_embd"])
    w.add_feed_forward_length(g["n_ff"])
    w.add_head_count(g["n_head"])
    w.add_head_count_kv(g["n_head_kv"])
    if g.get("rope_theta") is not None:
        w.add_rope_freq_base(float(g["rope_theta"]))
    w.add_layer_norm_rms_eps(1e-6)
    if head_dims:
        w.add_key_length(g["head_dim"])
        w.add_value_length(g.get("value_dim", g["head_dim"]))


def expert_keys(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``expert_count``, ``expert_used_count`` and ``expert_feed_forward_length``, one after
    the other as ``Qwen3MoeModel`` and ``Qwen3NextModel`` write them."""
    w = mw.w
    w.add_expert_count(g["n_expert"])
    w.add_expert_used_count(g["n_expert_used"])
    w.add_expert_feed_forward_length(g["n_ff_exp"])


def embeddings(
    mw: ModelWriter, n_embd: int, *, tied: bool = False, output_norm: Any = T.OUTPUT_NORM
) -> None:
    """``token_embd``, the final norm and (unless tied) ``output``."""
    mw.matrix(tname(T.TOKEN_EMBD), n_embd, mw.n_vocab)
    mw.norm(output_norm, None, n_embd)
    if not tied:
        mw.matrix(tname(T.OUTPUT), n_embd, mw.n_vocab)


def attention(
    mw: ModelWriter,
    il: int,
    n_embd: int,
    *,
    q_dim: int,
    k_dim: int,
    v_dim: int,
    o_dim: int | None = None,
    qk_norm: int | None = None,
    qkv_bias: bool = False,
    fused_qkv: bool = False,
) -> None:
    """Q/K/V/O projections of block ``il`` (``create_tensor_qkv`` + ``wo``).

    ``o_dim`` is the input width of ``attn_output`` (defaults to ``q_dim``);
    ``qk_norm`` adds per-head ``attn_q_norm``/``attn_k_norm`` of that size.
    """
    if fused_qkv:
        mw.matrix(tname(T.ATTN_QKV, il), n_embd, q_dim + k_dim + v_dim)
    else:
        mw.matrix(tname(T.ATTN_Q, il), n_embd, q_dim)
        mw.matrix(tname(T.ATTN_K, il), n_embd, k_dim)
        mw.matrix(tname(T.ATTN_V, il), n_embd, v_dim)
    if qkv_bias:
        mw.f32(tname(T.ATTN_Q, il, "bias"), q_dim)
        mw.f32(tname(T.ATTN_K, il, "bias"), k_dim)
        mw.f32(tname(T.ATTN_V, il, "bias"), v_dim)
    mw.matrix(tname(T.ATTN_OUT, il), o_dim if o_dim is not None else q_dim, n_embd)
    if qk_norm is not None:
        mw.norm(T.ATTN_Q_NORM, il, qk_norm)
        mw.norm(T.ATTN_K_NORM, il, qk_norm)


def head_attention(
    mw: ModelWriter,
    il: int,
    g: dict[str, Any],
    *,
    qk_norm: bool = False,
    qkv_bias: bool = False,
    fused_qkv: bool = False,
    output_gate: bool = False,
) -> None:
    """:func:`attention` of block ``il`` sized by the geometry's heads: q and o
    ``n_head * head_dim`` wide, k and v ``n_head_kv * head_dim``.

    ``qk_norm`` adds per-head norms of ``head_dim``; ``output_gate`` doubles the q
    projection, which then carries the output gate too (Qwen3-Next gated attention).
    """
    hd = g["head_dim"]
    q_dim, kv_dim = g["n_head"] * hd, g["n_head_kv"] * hd
    attention(
        mw,
        il,
        g["n_embd"],
        q_dim=2 * q_dim if output_gate else q_dim,
        k_dim=kv_dim,
        v_dim=kv_dim,
        o_dim=q_dim,
        qk_norm=hd if qk_norm else None,
        qkv_bias=qkv_bias,
        fused_qkv=fused_qkv,
    )


def dense_ffn(mw: ModelWriter, il: int, n_embd: int, n_ff: int, *, gate: bool = True) -> None:
    """SwiGLU (or up/down only) feed-forward of block ``il``."""
    if gate:
        mw.matrix(tname(T.FFN_GATE, il), n_embd, n_ff)
    mw.matrix(tname(T.FFN_UP, il), n_embd, n_ff)
    mw.matrix(tname(T.FFN_DOWN, il), n_ff, n_embd)


def moe_ffn(
    mw: ModelWriter,
    il: int,
    n_embd: int,
    n_ff_exp: int,
    n_expert: int,
    *,
    gate: bool = True,
    biases: bool = False,
) -> None:
    """Router plus stacked routed experts of block ``il``."""
    mw.matrix(tname(T.FFN_GATE_INP, il), n_embd, n_expert)
    if gate:
        mw.matrix(tname(T.FFN_GATE_EXP, il), n_embd, n_ff_exp, n_expert)
    mw.matrix(tname(T.FFN_UP_EXP, il), n_embd, n_ff_exp, n_expert)
    mw.matrix(tname(T.FFN_DOWN_EXP, il), n_ff_exp, n_embd, n_expert)
    if biases:
        mw.f32(tname(T.FFN_GATE_INP, il, "bias"), n_expert)
        mw.f32(tname(T.FFN_GATE_EXP, il, "bias"), n_ff_exp, n_expert)
        mw.f32(tname(T.FFN_UP_EXP, il, "bias"), n_ff_exp, n_expert)
        mw.f32(tname(T.FFN_DOWN_EXP, il, "bias"), n_embd, n_expert)


def shared_expert(
    mw: ModelWriter, il: int, n_embd: int, n_ff_shexp: int, *, gate_inp: bool = False
) -> None:
    """Shared-expert FFN of block ``il`` (with its scalar gate when ``gate_inp``)."""
    if gate_inp:
        mw.f32(tname(T.FFN_GATE_INP_SHEXP, il), n_embd)
    mw.matrix(tname(T.FFN_GATE_SHEXP, il), n_embd, n_ff_shexp)
    mw.matrix(tname(T.FFN_UP_SHEXP, il), n_embd, n_ff_shexp)
    mw.matrix(tname(T.FFN_DOWN_SHEXP, il), n_ff_shexp, n_embd)


def nextn_block(mw: ModelWriter, il: int, n_embd: int) -> None:
    """NextN/MTP input-fusion tensors of a trailing MTP block ``il``."""
    mw.matrix(tname(T.NEXTN_EH_PROJ, il), 2 * n_embd, n_embd)
    mw.norm(T.NEXTN_ENORM, il, n_embd)
    mw.norm(T.NEXTN_HNORM, il, n_embd)
    mw.norm(T.NEXTN_SHARED_HEAD_NORM, il, n_embd)
