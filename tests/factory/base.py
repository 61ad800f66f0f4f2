"""Writer machinery shared by every architecture of the test GGUF factory.

A :class:`ModelWriter` wraps :class:`gguf.GGUFWriter` and adds what every tiny
model needs: a small but valid GPT-2 style BPE vocabulary (~300 tokens) that
llama-server accepts, random weights of the right ggml shape, and geometry
bookkeeping. Shapes are given in ggml order (``ne0`` first, as in llama.cpp's
``create_tensor`` calls); the numpy array is created with the reversed shape.

Weights: matrices are F16 by default (``weight_type="f16"``); ``"q8_0"`` and
``"q4_0"`` (and ``"q4_1"``, for header-only tests) quantize matrices whose first dimension is a multiple of 32 (others
stay F16). Quantized weights are opt-in: a llama-server built with
``GGML_NATIVE`` on a CPU that reports AMX died with SIGILL in the AMX int8
kernels during warm-up unless run with ``--no-repack``. Vectors (norms, biases) and
tensors that ggml requires in F32 (convolutions, SSM ``A``/``D``, attention
sinks) are F32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

T = gguf.MODEL_TENSOR

_QTYPES = {
    "f16": gguf.GGMLQuantizationType.F16,
    "q8_0": gguf.GGMLQuantizationType.Q8_0,
    "q4_0": gguf.GGMLQuantizationType.Q4_0,
    "q4_1": gguf.GGMLQuantizationType.Q4_1,
    "q4_k": gguf.GGMLQuantizationType.Q4_K,
}
_FILE_TYPES = {
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "q4_k": gguf.LlamaFileType.MOSTLY_Q4_K_M,
}

# Geometry keys every architecture accepts, on top of its own defaults.
COMMON_DEFAULTS: dict[str, Any] = {"weight_type": "f16", "seed": 0}

# Geometry pieces several architectures' defaults share (spread into their dicts).
TINY_WIDTHS: dict[str, Any] = {"n_embd": 32, "n_ff": 64}
"""Hidden and FFN widths shrunk from thousands: the KV cache does not depend on them."""
GQA_32_8_128: dict[str, Any] = {"n_head": 32, "n_head_kv": 8, "head_dim": 128}
"""32 query heads, 8 KV heads of 128: Llama-3.1-8B, Mistral-Small-3.1, Qwen3-8B, Nemotron-H-8B."""
TINY_EXPERTS: dict[str, Any] = {"n_expert": 4, "n_expert_used": 2, "n_ff_exp": 32}
"""4 tiny routed experts (2 used) instead of dozens or hundreds: no KV cache of their own."""

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Merges of the tiny BPE vocabulary ("Ġ" is GPT-2's byte-level space).
_MERGE_PAIRS = (
    ("Ġ", "t"),
    ("Ġ", "a"),
    ("h", "e"),
    ("i", "n"),
    ("r", "e"),
    ("o", "n"),
    ("Ġt", "he"),
    ("e", "r"),
    ("a", "t"),
    ("Ġ", "s"),
    ("e", "n"),
    ("Ġ", "w"),
    ("o", "r"),
    ("i", "s"),
    ("Ġ", "c"),
    ("i", "t"),
    ("e", "s"),
    ("a", "n"),
    ("Ġ", "b"),
    ("e", "d"),
    ("Ġ", "f"),
    ("in", "g"),
    ("Ġ", "p"),
    ("o", "u"),
    ("a", "r"),
    ("Ġ", "m"),
    ("Ġ", "o"),
    ("l", "e"),
    ("Ġ", "d"),
    ("a", "l"),
    ("Ġ", "h"),
    ("i", "c"),
    ("Ġ", "i"),
    ("Ġ", "l"),
    ("Ġ", "n"),
    ("s", "t"),
    ("Ġa", "n"),
    ("Ġ", "in"),
    ("Ġo", "n"),
    ("Ġs", "t"),
)


def merge_geometry(
    arch: str, defaults: Mapping[str, Any], overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Return ``defaults`` updated by ``overrides``; unknown keys are a TypeError."""
    allowed = {**COMMON_DEFAULTS, **defaults}
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise TypeError(f"{arch}: unknown geometry override(s) {unknown}; known: {sorted(allowed)}")
    return {**allowed, **overrides}


def _byte_to_unicode() -> list[str]:
    """GPT-2's reversible byte -> printable unicode map, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[str], list[int]]:
    """Tokens, merges and token types of a ~300-token byte-level BPE vocabulary."""
    tokens = _byte_to_unicode()
    merges: list[str] = []
    for left, right in _MERGE_PAIRS:
        merged = left + right
        if merged not in tokens:
            tokens.append(merged)
            merges.append(f"{left} {right}")
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    tokens += list(SPECIAL_TOKENS)
    types += [int(gguf.TokenType.CONTROL)] * len(SPECIAL_TOKENS)
    return tokens, merges, types


def tname(kind: gguf.MODEL_TENSOR, bid: int | None = None, suffix: str | None = "weight") -> str:
    """The official GGUF tensor name of ``kind`` (block ``bid``), plus ``.suffix``."""
    base = gguf.TENSOR_NAMES[kind]
    name = base.format(bid=bid) if bid is not None else base
    return f"{name}.{suffix}" if suffix else name


class ModelWriter:
    """One GGUF file being written: metadata via :attr:`w`, tensors via helpers."""

    def __init__(self, path: Path, arch: str, *, weight_type: str = "f16", seed: int = 0) -> None:
        if weight_type not in _QTYPES:
            raise ValueError(f"weight_type must be one of {sorted(_QTYPES)}, not {weight_type!r}")
        self.path = Path(path)
        self.arch = arch
        self.w = gguf.GGUFWriter(str(self.path), arch)
        self._qtype = _QTYPES[weight_type]
        self._file_type = _FILE_TYPES[weight_type]
        self._rng = np.random.default_rng(seed)
        self.n_vocab = 0

    # -- metadata -----------------------------------------------------------------

    def general(self, name: str | None) -> None:
        """``general.*`` keys the converter always writes (``general.name`` unless None)."""
        if name is not None:
            self.w.add_name(name)
        self.w.add_file_type(self._file_type)
        self.w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    def vocab(self) -> int:
        """Write the tiny GPT-2 style tokenizer; returns n_vocab."""
        tokens, merges, types = tiny_vocab()
        self.w.add_tokenizer_model("gpt2")
        self.w.add_tokenizer_pre("gpt-2")
        self.w.add_token_list(tokens)
        self.w.add_token_types(types)
        self.w.add_token_merges(merges)
        eot = tokens.index("<|endoftext|>")
        self.w.add_bos_token_id(eot)
        self.w.add_eos_token_id(tokens.index("<|im_end|>"))
        self.w.add_pad_token_id(eot)
        self.w.add_add_bos_token(False)
        self.n_vocab = len(tokens)
        return self.n_vocab

    def add_array(self, key: str, values: Sequence[Any]) -> None:
        """An ``{arch}.``-prefixed array key (for keys gguf-py has no helper for)."""
        self.w.add_array(key.format(arch=self.arch), list(values))

    # -- tensors ------------------------------------------------------------------

    def matrix(self, name: str, *ne: int, scale: float = 0.02) -> None:
        """A weight matrix of ggml shape ``ne``: F16, or the quantized type if ne0 % 32 == 0."""
        data = self._rng.standard_normal(tuple(reversed(ne)), dtype=np.float32) * scale
        if self._qtype == gguf.GGMLQuantizationType.Q4_K:
            if ne[0] % 256 == 0:
                self.w.add_tensor(name, self._q4_k_blocks(data), raw_dtype=self._qtype)
            else:
                self.w.add_tensor(name, data.astype(np.float16))
        elif self._qtype != gguf.GGMLQuantizationType.F16 and ne[0] % 32 == 0:
            self.w.add_tensor(name, gguf.quants.quantize(data, self._qtype), raw_dtype=self._qtype)
        else:
            self.w.add_tensor(name, data.astype(np.float16))

    def _q4_k_blocks(self, data: np.ndarray) -> np.ndarray:
        """Q4_K blocks of ``data``'s shape (gguf-py cannot quantize Q4_K): small f16 scales
        and random 6-bit sub-scales and 4-bit values, a valid block of small finite weights."""
        rows, n_blocks = data.shape[0] * int(np.prod(data.shape[1:-1])), data.shape[-1] // 256
        blocks = self._rng.integers(0, 256, size=(rows, n_blocks, 144), dtype=np.uint8)
        scale = np.frombuffer(np.array([1e-4, 1e-4], dtype=np.float16).tobytes(), np.uint8)
        blocks[:, :, :4] = scale  # d and dmin
        return blocks.reshape(*data.shape[:-1], n_blocks * 144)

    def f32(self, name: str, *ne: int, value: float | None = None, scale: float = 0.02) -> None:
        """An F32 tensor: constant ``value`` if given, else small random numbers."""
        shape = tuple(reversed(ne))
        if value is None:
            data = self._rng.standard_normal(shape, dtype=np.float32) * scale
        else:
            data = np.full(shape, value, dtype=np.float32)
        self.w.add_tensor(name, data)

    def norm(self, kind: gguf.MODEL_TENSOR, bid: int | None, n: int) -> None:
        """An RMS/layer norm weight of ``n`` ones."""
        self.f32(tname(kind, bid), n, value=1.0)

    def write(self) -> Path:
        """Write header, metadata and tensors; close the file."""
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.path
