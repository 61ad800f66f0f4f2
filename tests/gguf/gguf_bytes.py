"""Helpers for the GGUF reader tests: hand-crafted header bytes and files written by gguf-py.

Hand-crafted bytes are for what ``gguf.GGUFWriter`` refuses to write (absurd counts,
unknown types, wrong versions); real files come from ``GGUFWriter`` so the reader is
checked against the reference writer and ``gguf.GGUFReader``.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np

VT = gguf.GGUFValueType
QT = gguf.GGMLQuantizationType


def gstr(text: str | bytes) -> bytes:
    """A GGUF string: u64 length, then the bytes."""
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def preamble(n_tensors: int, n_kv: int, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    """One metadata entry; ``payload`` is the already encoded value."""
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_u32(key: str, value: int) -> bytes:
    return kv(key, VT.UINT32, struct.pack("<I", value))


def kv_str(key: str, value: str) -> bytes:
    return kv(key, VT.STRING, gstr(value))


def array_payload(item_type: int, count: int, items: bytes) -> bytes:
    return struct.pack("<IQ", item_type, count) + items


def tensor_info(name: str, dims: tuple[int, ...], ggml_type: int, offset: int) -> bytes:
    return (
        gstr(name)
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def header(
    kvs: list[bytes],
    tensors: list[bytes],
    *,
    version: int = 3,
    n_tensors: int | None = None,
    n_kv: int | None = None,
) -> bytes:
    """A whole header; the counts default to the lists' lengths."""
    return (
        preamble(
            len(tensors) if n_tensors is None else n_tensors,
            len(kvs) if n_kv is None else n_kv,
            version,
        )
        + b"".join(kvs)
        + b"".join(tensors)
    )


class UnknownSizeSource:
    """A source that does not know its size (like a server without Content-Length)."""

    def __init__(self, data: bytes, name: str = "<unsized>") -> None:
        self._data = data
        self.name = name

    def size(self) -> int | None:
        return None

    def read(self, offset: int, length: int) -> bytes:
        return self._data[offset : offset + length]


class CountingSource:
    """Wraps a source and records every read, to check the cursor's own stats."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[tuple[int, int, int]] = []

    def size(self) -> int | None:
        return self.inner.size()

    def read(self, offset: int, length: int) -> bytes:
        data = self.inner.read(offset, length)
        self.calls.append((offset, length, len(data)))
        return data


# Headers whose counts or lengths are impossible, for the fail-fast tests.
_FOUR_GB = 4 * 1024**3
_TRUNCATED = r"(is truncated|would take at least)"
_BIG_STRING_IN_ARRAY = r"(5,000 string items|string #10 of 'k' claims 4,294,967,296)"
# case -> (bytes, what the message must say)
ABSURD: dict[str, tuple[bytes, str]] = {
    "1e9 tensors": (preamble(10**9, 0), r"claims 1,000,000,000 tensors"),
    "1e9 metadata entries": (preamble(0, 10**9), r"claims 1,000,000,000 metadata entries"),
    "1e6 tensors in a tiny file": (
        preamble(10**6, 0) + b"\0" * 64,
        r"(24,000,000 bytes|appears twice|truncated)",
    ),
    "4 GB key": (
        preamble(0, 1) + struct.pack("<Q", _FOUR_GB) + b"k" * 64,
        r"metadata entry #0 has a string of 4,294,967,296 bytes",
    ),
    "4 GB string value": (
        preamble(0, 1) + gstr("k") + struct.pack("<IQ", VT.STRING, _FOUR_GB),
        r"'k' has a string of 4,294,967,296 bytes",
    ),
    "100 MB string value": (
        preamble(0, 1) + gstr("k") + struct.pack("<IQ", VT.STRING, 100 << 20),
        _TRUNCATED,
    ),
    "2^40 array items": (
        preamble(0, 1) + gstr("k") + struct.pack("<IIQ", VT.ARRAY, VT.UINT8, 2**40),
        r"array of 1,099,511,627,776 items",
    ),
    "1e7 u64 items": (
        preamble(0, 1) + gstr("k") + struct.pack("<IIQ", VT.ARRAY, VT.UINT64, 10**7),
        _TRUNCATED,
    ),
    "1e7 strings": (
        preamble(0, 1) + gstr("k") + struct.pack("<IIQ", VT.ARRAY, VT.STRING, 10**7),
        _TRUNCATED,
    ),
    "4 GB string inside a big array": (
        preamble(0, 1)
        + gstr("k")
        + struct.pack("<IIQ", VT.ARRAY, VT.STRING, 5000)
        + gstr("ab") * 10
        + struct.pack("<Q", _FOUR_GB),
        _BIG_STRING_IN_ARRAY,
    ),
    "4 GB tensor name": (
        preamble(1, 0) + struct.pack("<Q", _FOUR_GB) + b"\0" * 64,
        r"tensor info #0 has a string of 4,294,967,296 bytes",
    ),
}


# What ``write_rich_gguf`` stores, so tests can compare without trusting any reader.
RICH_SCALARS: dict[str, tuple[int, Any]] = {
    "test.u8": (VT.UINT8, 250),
    "test.i8": (VT.INT8, -100),
    "test.u16": (VT.UINT16, 65000),
    "test.i16": (VT.INT16, -32000),
    "test.u32": (VT.UINT32, 4_000_000_000),
    "test.i32": (VT.INT32, -2_000_000_000),
    "test.f32": (VT.FLOAT32, 0.5),
    "test.u64": (VT.UINT64, 2**64 - 1),
    "test.i64": (VT.INT64, -(2**63)),
    "test.f64": (VT.FLOAT64, 3.141592653589793),
    "test.bool_true": (VT.BOOL, True),
    "test.bool_false": (VT.BOOL, False),
    "test.str": (VT.STRING, "héllo wörld ✓ {{ chat template }}"),
}
RICH_ARRAYS: dict[str, tuple[int, list[Any]]] = {
    "test.arr.u8": (VT.UINT8, [0, 1, 255]),
    "test.arr.i8": (VT.INT8, [-128, 0, 127]),
    "test.arr.u16": (VT.UINT16, [0, 65535]),
    "test.arr.i16": (VT.INT16, [-32768, 32767]),
    "test.arr.u32": (VT.UINT32, [1, 2, 4_294_967_295]),
    "test.arr.i32": (VT.INT32, [-1, 0, 1, 2_147_483_647]),
    "test.arr.f32": (VT.FLOAT32, [0.25, -1.5, 1e10]),
    "test.arr.u64": (VT.UINT64, [2**64 - 1, 0]),
    "test.arr.i64": (VT.INT64, [-(2**63), 2**63 - 1]),
    "test.arr.f64": (VT.FLOAT64, [1e-300, -2.5]),
    "test.arr.bool": (VT.BOOL, [True, False, True]),
    "test.arr.str": (VT.STRING, ["a", "", "ünïcode", "x" * 300]),
    "test.arr.small4096": (VT.INT32, list(range(4096))),
}
RICH_NESTED: dict[str, list[Any]] = {
    "test.nested.int": [[1, 2], [3, 4, 5]],
    "test.nested.str": [["a", "b"], ["c"]],
    "test.nested.deep": [[[1], [2, 3]], [[4]]],
}
RICH_LAZY: dict[str, tuple[int, list[Any]]] = {
    "tokenizer.ggml.tokens": (VT.STRING, [f"tok{i}" for i in range(5000)]),
    "tokenizer.ggml.token_type": (VT.INT32, [i % 6 for i in range(5000)]),
    "tokenizer.ggml.scores": (VT.FLOAT32, [float(-i) for i in range(4097)]),
}

# (name, ggml type, numpy shape: rows first, like GGUFWriter takes it)
RICH_TENSORS: list[tuple[str, QT, tuple[int, ...]]] = [
    ("token_embd.weight", QT.Q4_K, (8, 512)),
    ("blk.0.attn_q.weight", QT.Q8_0, (4, 64)),
    ("blk.0.attn_k.weight", QT.Q4_0, (2, 96)),
    ("blk.0.attn_v.weight", QT.Q6_K, (3, 256)),
    ("blk.0.ffn_up.weight", QT.F16, (5, 7)),
    ("blk.0.attn_norm.weight", QT.F32, (13,)),
    ("blk.0.ffn_gate.weight", QT.BF16, (2, 3, 4)),
    ("output.weight", QT.Q5_K, (1, 256)),
    ("rope_freqs.weight", QT.I32, (2, 2, 2, 2)),
]


def tensor_payload(ggml_type: QT, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random raw bytes of the right size for a tensor of ``shape`` (values in a row last)."""
    block, type_size = gguf.GGML_QUANT_SIZES[ggml_type]
    *rows, ne0 = shape
    byte_shape = (*rows, ne0 // block * type_size)
    return np.random.default_rng(seed).integers(0, 256, size=byte_shape, dtype=np.uint8)


def write_rich_gguf(path: Path, *, alignment: int | None = None) -> Path:
    """Write a GGUF with every value type, nested and lazy arrays, and tensors of many types."""
    writer = gguf.GGUFWriter(path, "llama")
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_name("rich test model")
    for key, (vtype, value) in RICH_SCALARS.items():
        writer.add_key_value(key, value, VT(vtype))
    for key, (vtype, items) in {**RICH_ARRAYS, **RICH_LAZY}.items():
        writer.add_key_value(key, items, VT.ARRAY, sub_type=VT(vtype))
    for key, nested in RICH_NESTED.items():
        writer.add_array(key, nested)
    for index, (name, ggml_type, shape) in enumerate(RICH_TENSORS):
        writer.add_tensor(name, tensor_payload(ggml_type, shape, index), raw_dtype=ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
