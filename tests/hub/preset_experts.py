"""The routed experts' bytes a plain ``Q4_K_M`` quant gives each block, from the geometry.

What llama.cpp b11312's ``llama-quantize`` does for ``LLAMA_FTYPE_MOSTLY_Q4_K_M``
(``llama_tensor_get_type`` in src/llama-quant.cpp): the gate and up experts keep the
ftype's Q4_K; ``ffn_down`` (routed experts included) becomes Q6_K on the "more bits"
layers, the layer read from the tensor's name (``blk.N.``) out of ``n_layer`` blocks. The
shipped presets' ``experts_bytes`` were derived this way; recomputing them here from the
model's published geometry (``preset_geometry``) keeps a typo in a 48-number list from
passing. A shape a Q4_K/Q6_K row cannot hold (columns not a multiple of 256) would fall
back to another type: refused here rather than priced wrong.
"""

from __future__ import annotations

from homelab.gguf.ggml_types import row_bytes
from homelab.gguf.header import GgufHeader

_QK_K = 256
"""Values per block of the K-quants (Q4_K, Q6_K)."""


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's rule for the layers whose ``ffn_down`` gets Q6_K under Q4_K_M."""
    eighth = n_layers // 8
    return i_layer < eighth or i_layer >= 7 * n_layers // 8 or (i_layer - eighth) % 3 == 2


def q4_k_m_experts(header: GgufHeader) -> tuple[int, ...]:
    """Each block's ``ffn_{gate,up,down}_exps`` bytes at Q4_K_M; 0 for leading dense blocks.

    Raises:
        ValueError: a dimension llama-quantize would give a fallback type.
    """
    arch = header.metadata["general.architecture"]

    def key(name: str, default: int | None = None) -> int:
        value = header.metadata.get(f"{arch}.{name}", default)
        if not isinstance(value, int):
            raise ValueError(f"{arch}.{name} is not one integer: {value!r}")
        return value

    blocks, width = key("block_count"), key("embedding_length")
    expert_width, experts = key("expert_feed_forward_length"), key("expert_count")
    dense = key("leading_dense_block_count", 0)
    for columns in (width, expert_width):
        if columns % _QK_K:
            raise ValueError(f"{columns} columns: llama-quantize falls back from Q4_K/Q6_K")
    weights = experts * width * expert_width  # each of gate, up and down
    gate_up = 2 * row_bytes("Q4_K", weights)
    return tuple(
        0
        if il < dense
        else gate_up + row_bytes("Q6_K" if use_more_bits(il, blocks) else "Q4_K", weights)
        for il in range(blocks)
    )
