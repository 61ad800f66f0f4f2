"""The GGUF tensor-info records read in bulk, into a :class:`~homelab.gguf.tensor_table.TensorTable`.

Each record is a string name (u64 length, bytes), u32 n_dims, n_dims x u64 dims, u32 ggml
type and u64 data offset. :mod:`homelab.gguf.reader` hands the table to
:func:`bulk_tensor_infos` first; it reads the plainly sound records that lie wholly in the
buffer, and stops at the first that is not, which the reader's careful per-record code
then reads (refilling the buffer) or refuses with its own message.

Why it is quick: a record's n_dims, dims and type are looked up by their bytes as the file
stores them, so each distinct shape is unpacked and checked once (a 40,000-tensor MoE has
a dozen); per record the loop only slices the name, takes the offset, and files the row
under its block group.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from math import prod

from homelab.gguf.ggml_types import GGML_TYPES
from homelab.gguf.source import ByteCursor
from homelab.gguf.tensor_table import TensorShape, TensorTable, block_of

MAX_KEY_BYTES = (1 << 16) - 1
"""The GGUF spec limits keys (and we also tensor names) to 65535 bytes."""
MAX_DIMS = 4
INT64_MAX = (1 << 63) - 1
"""ggml counts elements in ``int64_t``: no tensor has more."""
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_KNOWN_TYPES = {t.type_id: (t.block_size, t.type_size, t.name) for t in GGML_TYPES.values()}


def plain_shape(raw: bytes) -> TensorShape | None:
    """The shape a record's n_dims, dims and type bytes say, when every check of the careful
    reader passes plainly (a known type, 1 to 2**63 - 1 elements, whole blocks in ne0);
    None otherwise (the careful reader reads it, or says what is wrong)."""
    n_dims = len(raw) // 8 - 1
    values = struct.unpack_from(f"<{n_dims}QI", raw, 4)
    dims, ggml_type = values[:n_dims], values[n_dims]
    kind = _KNOWN_TYPES.get(ggml_type)
    elements = prod(dims)
    if kind is None or not 0 < elements <= INT64_MAX:
        return None
    block, size, type_label = kind
    if (dims[0] if n_dims else 1) % block:
        return None
    return TensorShape(dims, ggml_type, type_label, elements // block * size)


def bulk_tensor_infos(
    cur: ByteCursor, n_tensors: int, alignment: int, seen: set[str], table: TensorTable
) -> int:
    """Append to ``table`` the tensor infos from ``cur.pos`` on while each lies wholly in the
    buffer and passes every check of the reader's careful ``tensor_info`` plainly (a plain
    shape, an aligned offset, a new name); return the position of the first one that does
    not (the careful reader then reads it, or says what is wrong).

    Why: a 40,000-tensor MoE header is 40,000 of these records. :func:`_plain_records` reads
    them with the fewest steps a record (the checks that hold for a whole run of records,
    unique names and aligned offsets, are made once for the run, after it); when a run fails
    them, it is read again by :func:`_checked_records`, one check a record, which stops at
    the first that fails. Either decides nothing on its own: anything unusual goes to the
    careful reader.
    """
    mark = table.mark()
    end, raw_names = _plain_records(cur, n_tensors, table)
    names = _decoded(raw_names)
    fresh = set(names)
    mask = alignment - 1
    offsets = table.offsets[mark.rows :]
    if len(fresh) == len(names) and seen.isdisjoint(fresh) and not any(map(mask.__and__, offsets)):
        table.names += names
        seen |= fresh
        table.invalidate()
        return end
    table.rollback(mark)
    return _checked_records(cur, n_tensors, alignment, seen, table)


def _decoded(raw_names: list[bytes]) -> list[str]:
    """The names as str, each as ``bytes.decode("utf-8", "replace")`` gives it: decoded at
    once, joined by newlines (the decoder never takes an ASCII byte into a replaced
    sequence), one by one when a name holds a newline."""
    joined = b"\n".join(raw_names)
    if joined.count(b"\n") == len(raw_names) - 1:
        return joined.decode("utf-8", "replace").split("\n") if raw_names else []
    return [name.decode("utf-8", "replace") for name in raw_names]


_Filing = tuple[int, Callable[[int], None], Callable[[int], None], int]
"""A group the bulk loop knows: the length of its rest of the name (the bytes it is known by
hold the rest and the shape: the same bytes with another split are another group), its
blocks' and offsets' appends, its shape's id."""


def _plain_records(cur: ByteCursor, n_tensors: int, table: TensorTable) -> tuple[int, list[bytes]]:
    """Rows for the records wholly in the buffer whose shape is a plain one, their names
    left as bytes (returned, in order; ``table.names`` is not extended); the position where
    it stopped.

    Most records are the next tensor of the block the last one was in, of a (rest of the
    name, shape) seen in an earlier block: for those the loop checks the name starts as the
    last one's did (``blk.N.``), looks the record's bytes from the name's dot to its type
    up among the groups it knows, and files the row there. Anything else (a new block, a
    new group, a tensor outside the blocks) takes the longer way.
    """
    buf, base = cur.buf, cur.buf_start
    i = cur.pos - base
    u64, u32 = _U64.unpack_from, _U32.unpack_from
    raw_shapes = table.raw_shapes
    names: list[bytes] = []
    add_name, add_offset, add_shape = names.append, table.offsets.append, table.shape_ids.append
    known: dict[bytes, _Filing] = {}  # the bytes from a name's dot to its type -> its group
    prefix, cut, dot_at, block = b"\0", 0, 0, 0  # the block the last record was in
    first = len(table)
    try:  # a record that runs past the buffer ends the loop with struct.error
        for row in range(first, n_tensors):
            (length,) = u64(buf, i)
            j = i + 8 + length
            (n_dims,) = u32(buf, j)
            if length > MAX_KEY_BYTES or n_dims > MAX_DIMS:
                break
            k = j + 16 + 8 * n_dims
            (offset,) = u64(buf, k - 8)
            name = buf[i + 8 : j]
            if name.startswith(prefix):  # the block of the last record: a group it knows?
                filing = known.get(buf[i + cut : k - 8])
                if filing is not None and filing[0] == length - dot_at:
                    add_name(name)
                    add_offset(offset)
                    add_shape(filing[3])
                    filing[1](block)
                    filing[2](offset)
                    i = k
                    continue
            sid = raw_shapes.get(raw := buf[j : k - 8])
            if sid is None:
                shape = plain_shape(raw)
                if shape is None:
                    break
                sid = raw_shapes[raw] = table.shape_id(shape)
            add_name(name)
            add_offset(offset)
            add_shape(sid)
            text = name.decode("utf-8", "replace")
            in_block = block_of(text)
            if in_block is None:
                table.loose.append(row)
            elif name[4 : (dot := name.find(b".", 4))].isdigit():  # ASCII digits: known by bytes
                block = in_block[0]
                prefix, cut, dot_at = name[: dot + 1], 8 + dot, dot
                group = table.group(in_block[1], sid)
                known[buf[i + cut : k - 8]] = (
                    length - dot,
                    group.blocks.append,
                    group.offsets.append,
                    sid,
                )
                group.blocks.append(block)
                group.offsets.append(offset)
            else:  # a block numbered in other decimal digits: filed the longer way only
                group = table.group(in_block[1], sid)
                group.blocks.append(in_block[0])
                group.offsets.append(offset)
            i = k
    except (struct.error, OverflowError):
        pass  # the record at i runs past the buffer (or its length is absurd)
    return base + i, names


def _checked_records(
    cur: ByteCursor, n_tensors: int, alignment: int, seen: set[str], table: TensorTable
) -> int:
    """The records from ``cur.pos`` on, every check record by record, up to the first that
    lies partly past the buffer or fails one; the position of that one."""
    buf, base = cur.buf, cur.buf_start
    i = cur.pos - base
    u64, u32 = _U64.unpack_from, _U32.unpack_from
    mask = alignment - 1
    try:
        for _ in range(len(table), n_tensors):
            (length,) = u64(buf, i)
            j = i + 8 + length
            (n_dims,) = u32(buf, j)
            if length > MAX_KEY_BYTES or n_dims > MAX_DIMS:
                break
            k = j + 16 + 8 * n_dims
            (offset,) = u64(buf, k - 8)
            name = buf[i + 8 : j].decode("utf-8", "replace")
            if offset & mask or name in seen:
                break
            sid = table.raw_shapes.get(raw := buf[j : k - 8])
            if sid is None:
                shape = plain_shape(raw)
                if shape is None:
                    break
                sid = table.raw_shapes[raw] = table.shape_id(shape)
            seen.add(name)
            table.append_row(name, sid, offset)
            i = k
    except (struct.error, OverflowError):
        pass
    return base + i
