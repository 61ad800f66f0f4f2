"""Header-only GGUFs at a real model's size: tensor infos with real shapes and types, the
data section a hole (a sparse file), so a 18 GB model's header is written in a second and
planned as the real file would be.

The types are llama-quantize's ``Q4_K_M`` mix, written out from the pinned llama.cpp's
``src/llama-quant.cpp`` (``tensor_allows_quantization``, ``llama_tensor_get_type_impl``,
``tensor_type_fallback``; build b11312) for what a plain decoder's tensors are:

- 1-D tensors (norms, biases) and ``ffn_gate_inp`` (the router: "do not quantize expert
  gating tensors") keep the converter's F32;
- ``output.weight``: Q6_K (``OUTPUT``: any type but Q8_0 becomes Q6_K when ne0 % 256 == 0);
- ``attn_v`` and ``ffn_down`` (the routed experts' ``ffn_down_exps`` too: the category is
  found by ``name.find("ffn_down")``): Q6_K where ``use_more_bits(i, n)`` — the first and
  last eighth of the blocks and every third between — else Q4_K. ``i`` is the block
  (``ffn_down``: parsed from the name when ``n_expert > 1``; ``attn_v``: the count of
  ``attn_v`` tensors seen, the block when each block has one, in order);
- ``token_embd`` (untied) and every other matrix: Q4_K, the mix's default;
- the 8-expert bumps (``attn_k``/``attn_v`` to Q8_0, ``attn_output`` to Q5_K) apply only
  when ``n_expert == 8``; a row not a multiple of 256 falls back (Q4_K→Q5_0, Q6_K→Q8_0,
  then F16 when not even a multiple of 32).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .base import GQA_32_8_128, ModelWriter
from .dense import build_qwen3moe

QT = gguf.GGMLQuantizationType
TypeRule = Callable[[str, tuple[int, ...]], QT]
"""The ggml type of one matrix (name, ggml shape ``ne``)."""

_BLOCK = re.compile(r"^blk\.(\d+)\.")
_FALLBACK = {QT.Q4_K: QT.Q5_0, QT.Q5_K: QT.Q5_1, QT.Q6_K: QT.Q8_0}
"""``tensor_type_fallback``: the 32-value type a 256-value type falls back to."""


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's ``use_more_bits`` (C++ integer division; ``i < n/8`` is checked
    first, so the modulo never sees a negative number)."""
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


def q4_k_m_rule(n_layer: int, n_expert: int) -> TypeRule:
    """The ``Q4_K_M`` type of a plain decoder's matrix, as the module docstring says."""

    def rule(name: str, ne: tuple[int, ...]) -> QT:
        if len(ne) < 2 or not name.endswith("weight") or "ffn_gate_inp" in name:
            return QT.F32
        block = _BLOCK.match(name)
        layer = int(block.group(1)) if block else 0
        kind = QT.Q4_K
        if name == "output.weight":
            kind = QT.Q6_K
        elif n_expert == 8 and ("attn_v.weight" in name or "attn_k.weight" in name):
            kind = QT.Q8_0
        elif n_expert == 8 and "attn_output.weight" in name:
            kind = QT.Q5_K
        elif ("attn_v.weight" in name or "ffn_down" in name) and use_more_bits(layer, n_layer):
            kind = QT.Q6_K
        if ne[0] % 256:
            kind = _FALLBACK.get(kind, kind)
            if ne[0] % 32:
                kind = QT.F16
        return kind

    return rule


class HeaderOnlyWriter(ModelWriter):
    """The factory's writer, describing tensors instead of storing them: only the tensor
    infos are written (types from ``rule``), the data section is a hole of the right size,
    and the vocabulary has ``n_vocab`` plain tokens (its length is what a plan reads)."""

    def __init__(self, path: Path, arch: str, rule: TypeRule, n_vocab: int = 0) -> None:
        super().__init__(path, arch)
        self.rule = rule
        self.vocab_size = n_vocab
        self._data_bytes = 0

    def _info(self, name: str, ne: tuple[int, ...], kind: QT) -> None:
        block, size = gguf.GGML_QUANT_SIZES[kind]
        n_bytes = int(np.prod(ne)) // block * size
        self.w.add_tensor_info(
            name, tuple(reversed(ne)), np.dtype(np.float32), n_bytes, raw_dtype=kind
        )
        self._data_bytes += -(-n_bytes // 32) * 32  # gguf-py aligns each tensor's data to 32

    def matrix(self, name: str, *ne: int, scale: float = 0.02) -> None:
        self._info(name, tuple(ne), self.rule(name, tuple(ne)))

    def f32(self, name: str, *ne: int, value: float | None = None, scale: float = 0.02) -> None:
        self._info(name, tuple(ne), QT.F32)

    def vocab(self) -> int:
        tokens = [f"t{i}" for i in range(self.vocab_size - 1)] + ["<|im_end|>"]
        self.w.add_tokenizer_model("gpt2")
        self.w.add_token_list(tokens)
        self.w.add_token_types([1] * len(tokens))
        self.w.add_eos_token_id(len(tokens) - 1)
        self.n_vocab = len(tokens)
        return self.n_vocab

    def write(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_ti_data_to_file()
        self.w.close()
        header_size = self.path.stat().st_size
        os.truncate(self.path, -(-header_size // 32) * 32 + self._data_bytes)
        return self.path


QWEN3_30B_A3B: dict[str, Any] = {
    "n_layer": 48,
    "n_ctx_train": 40960,
    "n_embd": 2048,
    "n_ff": 6144,
    **GQA_32_8_128,
    "n_head_kv": 4,
    "n_expert": 128,
    "n_expert_used": 8,
    "n_ff_exp": 768,
    "rope_theta": 1000000.0,
}
"""Qwen3-30B-A3B's config.json: 48 layers, hidden 2048, 32 q heads and 4 KV heads of 128,
128 experts (8 used) of 768, vocab 151,936, 40,960 trained positions."""
QWEN3_30B_A3B_VOCAB = 151_936


def write_qwen3_30b_a3b_q4_k_m(path: Path, **overrides: Any) -> Path:
    """The header of a Qwen3-30B-A3B ``Q4_K_M`` file (the factory's ``qwen3moe`` tensors
    and keys, in its order) with a sparse data section; ``overrides`` change the geometry."""
    g = {**QWEN3_30B_A3B, **overrides}
    mw = HeaderOnlyWriter(path, "qwen3moe", q4_k_m_rule(g["n_layer"], g["n_expert"]))
    mw.vocab_size = g.pop("n_vocab", QWEN3_30B_A3B_VOCAB)
    mw.w.add_name("Qwen3-30B-A3B (header only)")
    mw.w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    mw.w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    mw.vocab()
    build_qwen3moe(mw, g)
    return mw.write()
