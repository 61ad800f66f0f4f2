"""Write a parsed header back out as GGUF bytes, with values changed, for hostile-input tests.

A real header (read from a factory GGUF) is the starting point; a test changes metadata
values or tensor infos into what no converter writes (``head_count_kv = 2**32 - 1``, an
unknown tensor type) and gets header bytes that ``read_header`` parses again. No tensor
data is written: planning reads only the header.

Value types are chosen from the Python value (``Typed`` pins one): a non-negative int is a
uint32 when it fits, else a uint64; a negative one an int32 or int64; a float a float64.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf

from homelab.gguf.header import GgufHeader, LazyArray, TensorInfo
from homelab.gguf.model_file import read_model

VT = gguf.GGUFValueType

_SCALAR_FORMATS = {
    VT.UINT8: "<B",
    VT.INT8: "<b",
    VT.UINT16: "<H",
    VT.INT16: "<h",
    VT.UINT32: "<I",
    VT.INT32: "<i",
    VT.FLOAT32: "<f",
    VT.BOOL: "<?",
    VT.UINT64: "<Q",
    VT.INT64: "<q",
    VT.FLOAT64: "<d",
}


@dataclass(frozen=True)
class Typed:
    """A value written with this exact GGUF value type (e.g. an int32 of -1)."""

    vtype: int
    value: Any


def _gstr(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw


def value_type(value: Any) -> int:
    """The GGUF value type ``encode`` writes ``value`` as."""
    if isinstance(value, Typed):
        return value.vtype
    if isinstance(value, bool):
        return VT.BOOL
    if isinstance(value, int):
        if value >= 0:
            return VT.UINT32 if value < 2**32 else VT.UINT64
        return VT.INT32 if value >= -(2**31) else VT.INT64
    if isinstance(value, float):
        return VT.FLOAT64
    if isinstance(value, str):
        return VT.STRING
    if isinstance(value, (list, tuple)):
        return VT.ARRAY
    raise TypeError(f"cannot encode {value!r} as a GGUF value")


def _payload(vtype: int, value: Any) -> bytes:
    if isinstance(value, Typed):
        value = value.value
    if vtype == VT.STRING:
        return _gstr(value)
    if vtype == VT.ARRAY:
        items = list(value)
        item_type = _item_type(items)
        if item_type == VT.ARRAY or item_type == VT.STRING:
            body = b"".join(_payload(item_type, item) for item in items)
        else:
            fmt = _SCALAR_FORMATS[VT(item_type)]
            body = b"".join(struct.pack(fmt, _raw(item)) for item in items)
        return struct.pack("<IQ", item_type, len(items)) + body
    return struct.pack(_SCALAR_FORMATS[VT(vtype)], value)


def _item_type(items: list[Any]) -> int:
    """One value type for an array: a pinned (``Typed``) item's, else one every item fits."""
    if not items:
        return VT.INT32
    pinned = [item.vtype for item in items if isinstance(item, Typed)]
    if pinned:
        return pinned[0]
    if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
        low, high = min(items), max(items)
        return value_type(low) if low < 0 else value_type(high)
    return value_type(items[0])


def _raw(item: Any) -> Any:
    return item.value if isinstance(item, Typed) else item


def encode(
    metadata: Mapping[str, Any],
    tensors: Sequence[TensorInfo] | Sequence[tuple[str, tuple[int, ...], int, int]],
    *,
    version: int = 3,
) -> bytes:
    """GGUF header bytes: the preamble, ``metadata`` and the tensor infos (no data)."""
    parts = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(metadata))]
    for key, value in metadata.items():
        if isinstance(value, LazyArray):
            raise TypeError(f"{key}: a LazyArray was not decoded; it cannot be written back")
        vtype = value_type(value)
        parts.append(_gstr(key) + struct.pack("<I", vtype) + _payload(vtype, value))
    for tensor in tensors:
        if isinstance(tensor, TensorInfo):
            name, shape, ggml_type, offset = (
                tensor.name,
                tensor.shape,
                tensor.ggml_type,
                tensor.offset,
            )
        else:
            name, shape, ggml_type, offset = tensor
        parts.append(
            _gstr(name)
            + struct.pack("<I", len(shape))
            + struct.pack(f"<{len(shape)}Q", *shape)
            + struct.pack("<IQ", ggml_type, offset)
        )
    return b"".join(parts)


def encode_header(header: GgufHeader, **metadata_changes: Any) -> bytes:
    """``header`` written back, with ``metadata_changes`` (``None`` deletes a key).

    Keys use ``__`` for dots and ``ARCH`` for the architecture:
    ``ARCH__attention__head_count_kv=8``.
    """
    metadata = dict(header.metadata)
    arch = header.arch or ""
    for name, value in metadata_changes.items():
        key = name.replace("ARCH", arch).replace("__", ".")
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
    return encode(metadata, header.tensors, version=header.version)


def factory_header(arch: str, folder: Path, **geometry: Any) -> GgufHeader:
    """The header of a factory GGUF of ``arch`` (written into ``folder``)."""
    from tests.factory import write_gguf

    path = write_gguf(arch, folder / f"{arch}.gguf", **geometry)
    return read_model(path).header
