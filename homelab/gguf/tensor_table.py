"""The GGUF tensor-info table read in bulk: what makes a 40,000-tensor header quick to read.

Each record is a string name (u64 length, bytes), u32 n_dims, n_dims x u64 dims, u32 ggml
type and u64 data offset. :mod:`homelab.gguf.reader` hands the table to
:func:`bulk_tensor_infos` first; it reads the plainly sound records that lie wholly in
the buffer, and stops at the first that is not, which the reader's careful per-record
code then reads (refilling the buffer) or refuses with its own message.
"""

from __future__ import annotations

import struct
from math import prod

from homelab.gguf.ggml_types import GGML_TYPES
from homelab.gguf.header import TensorInfo
from homelab.gguf.source import ByteCursor

MAX_KEY_BYTES = (1 << 16) - 1
"""The GGUF spec limits keys (and we also tensor names) to 65535 bytes."""
MAX_DIMS = 4
INT64_MAX = (1 << 63) - 1
"""ggml counts elements in ``int64_t``: no tensor has more."""
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


_SHAPES = tuple(struct.Struct(f"<{n}QIQ") for n in range(MAX_DIMS + 1))
"""Each n_dims' rest of a tensor info: dims, ggml type, offset."""
_KNOWN_TYPES = {t.type_id: (t.block_size, t.type_size, t.name) for t in GGML_TYPES.values()}


def bulk_tensor_infos(
    cur: ByteCursor, n_tensors: int, alignment: int, seen: set[str], out: list[TensorInfo]
) -> int:
    """Append the tensor infos from ``cur.pos`` on while each lies wholly in the buffer and
    passes every check of the reader's careful ``tensor_info`` plainly (a known type, a shape
    of 1 to 2**63 - 1 elements, an aligned offset, a new name); return the position of the
    first one that does not (the careful reader then reads it, or says what is wrong).

    Why: a 40,000-tensor MoE header is 40,000 of these records; one loop of a few
    ``unpack_from`` calls each, with no per-record method calls, reads it several times
    faster. It decides nothing on its own: anything unusual goes to the careful reader.
    """
    buf, base = cur.buf, cur.buf_start
    i = cur.pos - base
    end = len(buf)
    u64, u32 = _U64.unpack_from, _U32.unpack_from
    shapes, types, append, add = _SHAPES, _KNOWN_TYPES, out.append, seen.add
    mask = alignment - 1
    new = tuple.__new__
    for _ in range(len(out), n_tensors):
        if i + 8 > end:
            break
        (length,) = u64(buf, i)
        j = i + 8 + length
        if length > MAX_KEY_BYTES or j + 4 > end:
            break
        (n_dims,) = u32(buf, j)
        if n_dims > MAX_DIMS:
            break
        shape = shapes[n_dims]
        k = j + 4 + shape.size
        if k > end:
            break
        values = shape.unpack_from(buf, j + 4)
        dims, ggml_type, offset = values[:n_dims], values[n_dims], values[-1]
        kind = types.get(ggml_type)
        elements = prod(dims)
        if kind is None or offset & mask or not 0 < elements <= INT64_MAX:
            break
        block, size, type_label = kind
        if (dims[0] if n_dims else 1) % block:
            break
        name = buf[i + 8 : j].decode("utf-8", "replace")
        if name in seen:
            break
        add(name)
        append(
            new(TensorInfo, (name, dims, ggml_type, type_label, offset, elements // block * size))
        )
        i = k
    return base + i
