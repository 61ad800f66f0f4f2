"""The GGUF tensor-info records read in bulk, into a :class:`~homelab.gguf.tensor_table.TensorTable`.

Each record is a string name (u64 length, bytes), u32 n_dims, n_dims x u64 dims, u32 ggml
type and u64 data offset. :mod:`homelab.gguf.reader` hands the table to
:func:`bulk_tensor_infos` first; it reads the plainly sound records that lie wholly in the
buffer, and stops at the first that is not, which the reader's careful per-record code
then reads (refilling the buffer) or refuses with its own message.

Why it is quick: a 40,000-tensor MoE header is 3,333 blocks of a dozen records, most of
them written alike but for the block number and the offsets. Once a block has been read
record by record (:class:`_Bulk` ``rows``), the next block that is written alike is read
whole with one ``unpack_from`` and checked byte for byte against it (``block``); a
record's shape is looked up by its bytes, so each distinct shape is unpacked and checked
once. The checks that hold for a whole run of records (unique names, aligned offsets) are
made once for the run, after it; a run that fails them is read again one check a record
(:func:`_checked_records`), which stops at the first that fails.
"""

from __future__ import annotations

import struct
from itertools import chain
from math import gcd, prod

from homelab.gguf.ggml_types import GGML_TYPES
from homelab.gguf.source import ByteCursor
from homelab.gguf.tensor_info import BlockGroup, BlockTemplate, TensorInfo, TensorShape, block_of
from homelab.gguf.tensor_table import BlockEntry, TensorTable

MAX_KEY_BYTES = (1 << 16) - 1
"""The GGUF spec limits keys (and we also tensor names) to 65535 bytes."""
MAX_DIMS = 4
INT64_MAX = (1 << 63) - 1
"""ggml counts elements in ``int64_t``: no tensor has more."""
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_KNOWN_TYPES = {t.type_id: (t.block_size, t.type_size, t.name) for t in GGML_TYPES.values()}
_MAX_DIGITS = 20
"""A block number longer than this is read record by record."""


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


def bulk_tensor_infos(cur: ByteCursor, n_tensors: int, alignment: int, table: TensorTable) -> int:
    """Append to ``table`` the tensor infos from ``cur.pos`` on while each lies wholly in the
    buffer and passes every check of the reader's careful ``tensor_info`` plainly (a plain
    shape, an aligned offset, a new name); return the position of the first one that does
    not (the careful reader then reads it, or says what is wrong). It decides nothing on
    its own: anything unusual goes to the careful reader.
    """
    mark = table.mark()
    table.seal()
    bulk = _Bulk(cur, table)
    end = bulk.read(n_tensors)
    table.file_blocks()
    if bulk.sound(alignment):
        return end
    table.rollback(mark)
    return _checked_records(cur, n_tensors, alignment, table)


def _decoded(raw_names: list[bytes]) -> list[str]:
    """The names as str, each as ``bytes.decode("utf-8", "replace")`` gives it: decoded at
    once, joined by newlines (the decoder never takes an ASCII byte into a replaced
    sequence), one by one when a name holds a newline."""
    joined = b"\n".join(raw_names)
    if raw_names and joined.count(b"\n") == len(raw_names) - 1:
        return joined.decode("utf-8", "replace").split("\n")
    return [name.decode("utf-8", "replace") for name in raw_names]


class _Family:
    """The block templates whose records have the same tail lengths: one ``unpack_from``
    layout reads a block of any of them, and its tails say which it is."""

    __slots__ = ("by_tails", "hits", "layouts", "lengths")

    def __init__(self, lengths: tuple[int, ...]) -> None:
        self.lengths = lengths
        self.hits = 0
        self.by_tails: dict[tuple[bytes, ...], _Known] = {}
        self.layouts: dict[int, struct.Struct] = {}

    def layout(self, digits: int) -> struct.Struct:
        """For a block numbered in ``digits`` digits: per record, its length and ``blk.``,
        its digits, its tail and its offset."""
        found = self.layouts.get(digits)
        if found is None:
            fields = "".join(f"12s{digits}s{tail}sQ" for tail in self.lengths)
            found = self.layouts[digits] = struct.Struct("<" + fields)
        return found


class _Known:
    """A block template, with what each record of a block of it starts with (its name's
    length, then ``blk.``) by the number of digits in the block number."""

    __slots__ = ("heads", "rests", "template")

    def __init__(self, template: BlockTemplate) -> None:
        self.template = template
        self.rests = tuple(map(len, template.rests))  # ASCII: characters are bytes
        self.heads: dict[int, tuple[bytes, ...] | None] = {}

    def head(self, digits: int) -> tuple[bytes, ...] | None:
        """None: a name would be longer than a key may be (the careful reader says so)."""
        if digits not in self.heads:
            lengths = [4 + digits + rest for rest in self.rests]
            fits = max(lengths) <= MAX_KEY_BYTES
            self.heads[digits] = tuple(_U64.pack(n) + b"blk." for n in lengths) if fits else None
        return self.heads[digits]


class _Bulk:
    """One bulk read: whole blocks matched against those read before, the rest record by
    record; what it added, for the checks made once after it."""

    def __init__(self, cur: ByteCursor, table: TensorTable) -> None:
        self.buf = cur.buf
        self.base = cur.buf_start
        self.i = cur.pos - cur.buf_start
        self.table = table
        self.families: list[_Family] = []
        """The templates of the blocks read record by record, most matched first."""
        self.blocks: list[BlockEntry] = []
        """Blocks read whole, not yet handed to the table."""
        self.offsets: list[int] = []
        """The offsets of the records read one by one."""
        self.block_offsets: list[tuple[int, ...]] = []

    def read(self, n_tensors: int) -> int:
        """Read up to the ``n_tensors``-th record, the buffer's end or the first record that
        is not plainly sound; the position where it stopped."""
        row, buf = len(self.table), self.buf
        while row < n_tensors:
            if self.families and buf.startswith(b"blk.", self.i + 8):
                matched = self.block(n_tensors - row)
                if matched:
                    row += matched
                    continue
            read = self.rows(n_tensors - row)
            if not read:
                break
            row += read
        self.flush()
        return self.base + self.i

    def block(self, room: int) -> int:
        """Read the block at ``i`` whole when it is written as a known one (the records it
        may take: ``room``); how many records it held (0: none matched)."""
        buf, i = self.buf, self.i
        dot = buf.find(b".", i + 12, i + 13 + _MAX_DIGITS)
        digits = dot - i - 12
        if digits < 1:
            return 0
        for rank, family in enumerate(self.families):
            if len(family.lengths) > room:
                continue
            fields = family.layout(digits)
            try:
                values = fields.unpack_from(buf, i)
            except struct.error:  # runs past the buffer
                continue
            known = family.by_tails.get(values[2::4])
            number = values[1]
            if (
                known is None
                or values[0::4] != known.head(digits)
                or values[1::4].count(number) != len(family.lengths)
                or not number.isdigit()
            ):
                continue
            offsets = values[3::4]
            self.blocks.append((known.template, number, offsets))
            self.block_offsets.append(offsets)
            self.i = i + fields.size
            family.hits += 1
            if rank and family.hits > self.families[rank - 1].hits:  # most matched first
                self.families[rank - 1], self.families[rank] = family, self.families[rank - 1]
            return len(offsets)
        return 0

    def flush(self) -> None:
        """Hand the blocks read whole so far to the table (before any row that follows)."""
        if self.blocks:
            self.table.add_blocks(self.blocks)
            self.blocks = []

    def rows(self, room: int) -> int:
        """Read records one by one from ``i``: at least one, then up to the first that starts
        a block other than the one being read (where :meth:`block` may take over), the
        ``room``-th, the buffer's end or one that is not plainly sound. A block read whole
        this way becomes a template. How many it read."""
        self.flush()
        buf, table = self.buf, self.table
        i = self.i
        u64, u32 = _U64.unpack_from, _U32.unpack_from
        raw_shapes = table.raw_shapes
        names: list[bytes] = []
        sids: list[int] = []
        offsets: list[int] = []
        add_name, add_sid, add_offset = names.append, sids.append, offsets.append
        known: dict[bytes, tuple[int, BlockGroup]] = {}  # a record's tail -> (rest's length, group)
        prefix, cut, dot_at, block = b"\0", 0, 0, 0  # the block being read
        tails: list[bytes] = []  # its records, to learn it as a template
        groups: list[BlockGroup] = []
        try:  # a record that runs past the buffer ends the loop with struct.error
            for _ in range(room):
                (length,) = u64(buf, i)
                j = i + 8 + length
                (n_dims,) = u32(buf, j)
                if length > MAX_KEY_BYTES or n_dims > MAX_DIMS:
                    break
                k = j + 16 + 8 * n_dims
                (offset,) = u64(buf, k - 8)
                name = buf[i + 8 : j]
                if name.startswith(prefix):  # the block being read: a group it knows?
                    tail = buf[i + cut : k - 8]
                    filed = known.get(tail)
                    if filed is not None and filed[0] == length - dot_at:
                        group = filed[1]
                        add_name(name)
                        add_sid(group.shape_id)
                        add_offset(offset)
                        group.blocks.append(block)
                        group.offsets.append(offset)
                        tails.append(tail)
                        groups.append(group)
                        i = k
                        continue
                else:  # another block, or a tensor outside the blocks
                    if tails:  # the block being read ended: learn it
                        self.learn(tails, groups)
                        tails, groups = [], []
                    if names and self.families and name.startswith(b"blk."):
                        break  # where a new block starts, one known may take it whole
                sid = raw_shapes.get(raw := buf[j : k - 8])
                if sid is None:
                    shape = plain_shape(raw)
                    if shape is None:
                        break
                    sid = raw_shapes[raw] = table.shape_id(shape)
                add_name(name)
                add_sid(sid)
                add_offset(offset)
                text = name.decode("utf-8", "replace")
                in_block = block_of(text)
                if in_block is None:
                    dims, ggml_type, type_name, n_bytes = table.shapes[sid]
                    table.loose.append(
                        TensorInfo(text, dims, ggml_type, type_name, offset, n_bytes)
                    )
                    prefix = b"\0"
                    i = k
                    continue
                group = table.group(in_block[1], sid)
                group.blocks.append(in_block[0])
                group.offsets.append(offset)
                dot = name.find(b".", 4)
                if name[4:dot].isdigit():  # ASCII digits: the block's records are known by bytes
                    if not name.startswith(prefix):
                        prefix, cut, dot_at, block = name[: dot + 1], 8 + dot, dot, in_block[0]
                    tail = buf[i + cut : k - 8]
                    known[tail] = (length - dot, group)
                    tails.append(tail)
                    groups.append(group)
                else:  # a block numbered in other decimal digits: read the longer way only
                    prefix = b"\0"
                i = k
        except (struct.error, OverflowError):
            pass  # the record at i runs past the buffer (or its length is absurd)
        self.i = i
        table.add_rows(_decoded(names), sids, offsets)
        self.offsets += offsets
        return len(names)

    def learn(self, tails: list[bytes], groups: list[BlockGroup]) -> None:
        """Keep a block read record by record as a template (once; not a block whose names
        are not ASCII, whose lengths in bytes the template would not know)."""
        key = tuple(tails)
        if not all(group.rest.isascii() for group in groups):
            return
        lengths = tuple(map(len, key))
        family = next((f for f in self.families if f.lengths == lengths), None)
        if family is None:
            family = _Family(lengths)
            self.families.append(family)
        if key not in family.by_tails:
            family.by_tails[key] = _Known(BlockTemplate(key, tuple(groups)))

    def sound(self, alignment: int) -> bool:
        """What was read passes the checks left for after the run: every offset aligned, and
        no name twice (no loose name twice; no block twice among the tensors of one rest of
        the name; a block numbered twice over, ``blk.1.`` and ``blk.01.``, is read again
        the careful way, which tells such names apart)."""
        every = gcd(*chain(self.offsets, chain.from_iterable(self.block_offsets)))
        if every % alignment:
            return False
        loose = self.table.loose
        if len({t.name for t in loose}) != len(loose):
            return False
        blocks: dict[str, list[int]] = {}
        for group in self.table.groups:
            blocks.setdefault(group.rest, []).extend(group.blocks)
        return all(len(set(members)) == len(members) for members in blocks.values())


def _checked_records(cur: ByteCursor, n_tensors: int, alignment: int, table: TensorTable) -> int:
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
            if offset & mask or table.has_name(name):
                break
            shape = plain_shape(buf[j : k - 8])
            if shape is None:
                break
            table.add(TensorInfo(name, *shape[:3], offset, shape.n_bytes))
            i = k
    except (struct.error, OverflowError):
        pass
    return base + i
