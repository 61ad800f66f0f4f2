"""Multi-head latent attention: deepseek2 (DeepSeek-V2-Lite geometry).

The current converter turns MLA into MQA with big heads: ``head_count_kv = 1``,
``key_length = kv_lora_rank + qk_rope_head_dim`` (576), ``value_length =
kv_lora_rank`` (512), plus ``key_length_mla = qk_nope + qk_rope`` (192) and
``value_length_mla = v_head_dim`` (128). With both ``*_mla`` keys present
llama.cpp caches K only (576 per token per layer); V is a view of K.

Query heads are cut from 16 to 2: they do not enter the KV cache and the
per-head ``attn_k_b``/``attn_v_b`` tensors dominate the file size otherwise.
``n_layer == 27`` selects llama.cpp's "lite" path (no ``q_lora_rank``).
"""

from __future__ import annotations

from typing import Any

from .base import TINY_EXPERTS, TINY_WIDTHS, ModelWriter, T, tname
from .blocks import common_llm_keys, dense_ffn, embeddings, moe_ffn, shared_expert

DEFAULTS: dict[str, dict[str, Any]] = {
    "deepseek2": {
        "n_layer": 27,
        "n_ctx_train": 163840,
        **TINY_WIDTHS,
        "n_head": 2,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "q_lora_rank": 0,
        "leading_dense_blocks": 1,
        **TINY_EXPERTS,
        "n_expert_shared": 2,
        "rope_theta": 10000.0,
    },
}


def _keys(mw: ModelWriter, g: dict[str, Any]) -> None:
    """``DeepseekV2Model.set_gguf_parameters`` (base keys with num_key_value_heads = 1)."""
    w = mw.w
    rank, rope = g["kv_lora_rank"], g["qk_rope_head_dim"]
    common_llm_keys(mw, {**g, "n_head_kv": 1}, head_dims=False)
    w.add_expert_count(g["n_expert"])
    w.add_expert_used_count(g["n_expert_used"])
    w.add_leading_dense_block_count(g["leading_dense_blocks"])
    w.add_vocab_size(mw.n_vocab)
    if g["q_lora_rank"]:
        w.add_q_lora_rank(g["q_lora_rank"])
    w.add_kv_lora_rank(rank)
    w.add_key_length(rank + rope)
    w.add_value_length(rank)
    w.add_key_length_mla(g["qk_nope_head_dim"] + rope)
    w.add_value_length_mla(g["v_head_dim"])
    w.add_expert_feed_forward_length(g["n_ff_exp"])
    w.add_expert_shared_count(g["n_expert_shared"])
    w.add_rope_dimension_count(rope)


def build_deepseek2(mw: ModelWriter, g: dict[str, Any]) -> None:
    """Write deepseek2 keys and tensors (MLA attention, dense lead, tiny MoE)."""
    _keys(mw, g)
    n_embd, n_head = g["n_embd"], g["n_head"]
    rank, rope, nope = g["kv_lora_rank"], g["qk_rope_head_dim"], g["qk_nope_head_dim"]
    k_mla = nope + rope
    embeddings(mw, n_embd)
    for il in range(g["n_layer"]):
        mw.norm(T.ATTN_NORM, il, n_embd)
        mw.norm(T.ATTN_KV_A_NORM, il, rank)
        if g["q_lora_rank"]:
            mw.norm(T.ATTN_Q_A_NORM, il, g["q_lora_rank"])
            mw.matrix(tname(T.ATTN_Q_A, il), n_embd, g["q_lora_rank"])
            mw.matrix(tname(T.ATTN_Q_B, il), g["q_lora_rank"], n_head * k_mla)
        else:
            mw.matrix(tname(T.ATTN_Q, il), n_embd, n_head * k_mla)
        mw.matrix(tname(T.ATTN_KV_A_MQA, il), n_embd, rank + rope)
        mw.matrix(tname(T.ATTN_K_B, il), nope, rank, n_head)
        mw.matrix(tname(T.ATTN_V_B, il), rank, g["v_head_dim"], n_head)
        mw.matrix(tname(T.ATTN_OUT, il), n_head * g["v_head_dim"], n_embd)
        mw.norm(T.FFN_NORM, il, n_embd)
        if il < g["leading_dense_blocks"]:
            dense_ffn(mw, il, n_embd, g["n_ff"])
        else:
            moe_ffn(mw, il, n_embd, g["n_ff_exp"], g["n_expert"])
            shared_expert(mw, il, n_embd, g["n_ff_exp"] * g["n_expert_shared"])


BUILDERS = {"deepseek2": build_deepseek2}
