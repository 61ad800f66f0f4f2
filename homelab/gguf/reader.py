"""Parse a GGUF header (metadata and tensor infos) from a ``ByteSource``, never tensor data.

Layout (GGUF v2/v3, little-endian): ``"GGUF"``, u32 version, u64 tensor count, u64
metadata count; then the metadata entries (string key, u32 value type, value); then the
tensor infos (string name, u32 n_dims, n_dims x u64 dims, u32 ggml type, u64 offset);
then padding to ``general.alignment`` and the tensor data, which we never read.

Why it is careful: a header is read before anything else about a model is known, often
from a half-downloaded or foreign file. Every count and length is checked against the
bytes the file can still hold (and against fixed limits when the size is unknown)
*before* anything is allocated or walked, so a corrupt header fails in microseconds with
a sentence naming the file and the offset, never a ``MemoryError`` or a traceback.

Why it is fast: big arrays (a 150k-token vocabulary and its merges) are not decoded.
Their lengths are walked with ``struct.unpack_from`` over the cursor's buffer, and the
result is a ``LazyArray`` that only remembers item type, count and offset.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

from homelab.errors import ModelFileError
from homelab.gc_pause import collector_paused
from homelab.gguf.ggml_types import tensor_bytes, type_name
from homelab.gguf.header import GgufHeader, LazyArray
from homelab.gguf.not_gguf import describe_foreign, version_problem
from homelab.gguf.source import ByteCursor, ByteSource
from homelab.gguf.tensor_info import TensorInfo
from homelab.gguf.tensor_records import INT64_MAX, MAX_DIMS, MAX_KEY_BYTES, bulk_tensor_infos
from homelab.gguf.tensor_table import TensorTable

MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

LAZY_ARRAY_ITEMS = 4096
"""Arrays with more items than this become a ``LazyArray`` instead of a list."""
MAX_TENSORS = 1 << 20
MAX_KV = 1 << 16
MAX_ARRAY_ITEMS = 1 << 24
MAX_STRING_BYTES = 256 << 20
MAX_NESTING = 8

STRING, ARRAY = 8, 9
_SCALARS: dict[int, struct.Struct] = {
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<?"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}
_VALUE_TYPE_NAMES = {
    0: "uint8",
    1: "int8",
    2: "uint16",
    3: "int16",
    4: "uint32",
    5: "int32",
    6: "float32",
    7: "bool",
    8: "string",
    9: "array",
    10: "uint64",
    11: "int64",
    12: "float64",
}
_MIN_ITEM_BYTES = {t: s.size for t, s in _SCALARS.items()} | {STRING: 8, ARRAY: 12}
_MIN_KV_BYTES = 8 + 4 + 1  # empty key, type, one-byte value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # empty name, n_dims = 0, type, offset
# Typical sizes, to tell the cursor how much header is still to come (see ByteCursor):
_KV_GUESS = 64  # "qwen2.attention.head_count_kv" and a number
_TENSOR_INFO_GUESS = 72  # "blk.12.ffn_down.weight", two dims, type, offset
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_PREAMBLE = struct.Struct("<4sIQQ")


def read_header(source: ByteSource) -> GgufHeader:
    """Read the header of the GGUF file behind ``source``.

    ``extra["read_stats"]`` tells what the parse fetched (a ``ReadStats``).

    Raises:
        ModelFileError: the bytes are not a GGUF file (empty, another format, a Git LFS
            pointer), a version homelab cannot read (v1, big-endian, newer), the file
            ends inside the header, or a count, length or type in it is impossible.
    """
    return _HeaderParser(ByteCursor(source)).parse()


class _HeaderParser:
    """One pass over one header; holds the cursor and the file name for messages."""

    def __init__(self, cur: ByteCursor) -> None:
        self.cur = cur
        self.name = cur.name

    def error(self, message: str, hint: str | None = None) -> ModelFileError:
        return ModelFileError(f"{self.name}: {message}", hint=hint)

    # -- primitives -------------------------------------------------------------------

    def u32(self) -> int:
        cur = self.cur
        off = cur.fill(4)  # before reading cur.buf: fill may replace it
        value: int = _U32.unpack_from(cur.buf, off)[0]
        cur.pos += 4
        return value

    def u64(self) -> int:
        cur = self.cur
        off = cur.fill(8)
        value: int = _U64.unpack_from(cur.buf, off)[0]
        cur.pos += 8
        return value

    def room(self, n: int, what: str) -> None:
        """Check that ``n`` more bytes can exist at the cursor before walking or allocating.

        Raises:
            ModelFileError: the file's known size leaves fewer than ``n`` bytes.
        """
        size, pos = self.cur.size, self.cur.pos
        if size is not None and pos + n > size:
            raise self.error(
                f"at offset {pos}, {what} would take at least {n:,} bytes, but only "
                f"{size - pos:,} remain",
                hint="The file is truncated or its header is corrupt.",
            )

    def string(self, limit: int, expect: int = 0) -> str:
        cur = self.cur
        off = cur.fill(8, expect)
        length: int = _U64.unpack_from(cur.buf, off)[0]
        if length > limit:
            raise self.error(
                f"{cur.what} has a string of {length:,} bytes at offset {cur.pos} "
                f"(the limit is {limit:,}); the header is corrupt"
            )
        cur.pos += 8
        if cur.size is not None and cur.pos + length > cur.size:
            self.room(length, f"the string of {cur.what}")  # raises, with the message
        off = cur.fill(length)
        cur.pos += length
        return cur.buf[off : off + length].decode("utf-8", "replace")

    # -- the header -------------------------------------------------------------------

    def parse(self) -> GgufHeader:
        version, n_tensors, n_kv = self.preamble()
        metadata: dict[str, Any] = {}
        tensor_infos_guess = n_tensors * _TENSOR_INFO_GUESS
        for index in range(n_kv):
            self.cur.what = f"metadata entry #{index}"
            key = self.string(MAX_KEY_BYTES, (n_kv - index) * _KV_GUESS + tensor_infos_guess)
            if key in metadata:
                raise self.error(
                    f"metadata key {key!r} appears twice (entry #{index}); "
                    "llama.cpp refuses such a file"
                )
            self.cur.what = f"the value of {key!r}"
            metadata[key] = self.value(self.u32(), key, 0)
        alignment = self.alignment(metadata)
        tensors = self.tensor_infos(n_tensors, alignment)
        header_bytes = self.cur.pos
        data_offset = -(-header_bytes // alignment) * alignment
        return GgufHeader(
            source_name=self.name,
            version=version,
            metadata=metadata,
            tensors=tensors,
            alignment=alignment,
            header_bytes=header_bytes,
            data_offset=data_offset,
            file_size=self.cur.size,
            extra={"read_stats": self.cur.stats},
        )

    def preamble(self) -> tuple[int, int, int]:
        cur = self.cur
        cur.what = "the file header"
        want = _PREAMBLE.size if cur.size is None else min(_PREAMBLE.size, cur.size)
        with contextlib.suppress(ModelFileError):  # a shorter unsized source: judged below
            cur.fill(want)
        head = cur.buf[: _PREAMBLE.size]
        if not head:
            raise self.error("the file is empty (0 bytes), not a GGUF model")
        if not head.startswith(MAGIC):
            raise self.error(f"not a GGUF file: {describe_foreign(head)}")
        if len(head) < 8:
            raise cur.truncated(8)
        version = _U32.unpack_from(head, 4)[0]
        if version not in SUPPORTED_VERSIONS:
            raise self.error(*version_problem(version, head[4:8]))
        off = cur.fill(_PREAMBLE.size)
        _, _, n_tensors, n_kv = _PREAMBLE.unpack_from(cur.buf, off)
        cur.pos = _PREAMBLE.size
        if n_tensors > MAX_TENSORS:
            raise self.error(
                f"the header claims {n_tensors:,} tensors (offset 8); no model has "
                f"more than {MAX_TENSORS:,}, so the header is corrupt"
            )
        if n_kv > MAX_KV:
            raise self.error(
                f"the header claims {n_kv:,} metadata entries (offset 16); the "
                f"limit is {MAX_KV:,}, so the header is corrupt"
            )
        self.room(
            n_tensors * _MIN_TENSOR_INFO_BYTES + n_kv * _MIN_KV_BYTES,
            f"{n_kv:,} metadata entries and {n_tensors:,} tensor infos",
        )
        return version, n_tensors, n_kv

    def alignment(self, metadata: dict[str, Any]) -> int:
        value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if type(value) is not int or value <= 0 or value & (value - 1):  # not a bool
            raise self.error(f"general.alignment is {value!r}; it must be a power of two")
        return value

    # -- metadata values --------------------------------------------------------------

    def value(self, vtype: int, key: str, depth: int) -> Any:
        scalar = _SCALARS.get(vtype)
        if scalar is not None:
            cur = self.cur
            off = cur.fill(scalar.size)
            value = scalar.unpack_from(cur.buf, off)[0]
            cur.pos += scalar.size
            return value
        if vtype == STRING:
            return self.string(MAX_STRING_BYTES)
        if vtype == ARRAY:
            return self.array(key, depth + 1)
        raise self.error(
            f"metadata {key!r} has unknown value type {vtype} at offset "
            f"{self.cur.pos - 4}; the header is corrupt"
        )

    def array_head(self, key: str, depth: int) -> tuple[int, int]:
        """Read and check an array's item type and count; returns them."""
        if depth > MAX_NESTING:
            raise self.error(
                f"metadata {key!r} nests arrays more than {MAX_NESTING} deep "
                f"(offset {self.cur.pos}); the header is corrupt"
            )
        item_type, count = self.u32(), self.u64()
        min_item = _MIN_ITEM_BYTES.get(item_type)
        if min_item is None:
            raise self.error(
                f"metadata {key!r} is an array of unknown item type {item_type} "
                f"(offset {self.cur.pos - 12}); the header is corrupt"
            )
        if count > MAX_ARRAY_ITEMS:
            raise self.error(
                f"metadata {key!r} claims an array of {count:,} items (offset "
                f"{self.cur.pos - 8}); the limit is {MAX_ARRAY_ITEMS:,}"
            )
        type_label = _VALUE_TYPE_NAMES[item_type]
        self.room(count * min_item, f"the {count:,} {type_label} items of {key!r}")
        return item_type, count

    def array(self, key: str, depth: int) -> list[Any] | LazyArray:
        item_type, count = self.array_head(key, depth)
        if count > LAZY_ARRAY_ITEMS:
            lazy = LazyArray(item_type, count, self.cur.pos)
            self.skip_items(item_type, count, key, depth)
            return lazy
        scalar = _SCALARS.get(item_type)
        if scalar is not None:
            cur = self.cur
            n_bytes = count * scalar.size
            off = cur.fill(n_bytes)
            items = list(struct.unpack_from(f"<{count}{scalar.format[1:]}", cur.buf, off))
            cur.pos += n_bytes
            return items
        if item_type == STRING:
            return [self.string(MAX_STRING_BYTES) for _ in range(count)]
        return [self.array(key, depth + 1) for _ in range(count)]

    def skip_items(self, item_type: int, count: int, key: str, depth: int) -> None:
        scalar = _SCALARS.get(item_type)
        if scalar is not None:
            self.cur.skip(count * scalar.size)
        elif item_type == STRING:
            self.skip_strings(count, key)
        else:
            for _ in range(count):
                inner_type, inner_count = self.array_head(key, depth + 1)
                self.skip_items(inner_type, inner_count, key, depth + 1)

    def skip_strings(self, count: int, key: str) -> None:
        """Walk past ``count`` strings reading only their length prefixes.

        The inner loop is the hot path of a whole parse (a vocabulary and its merges are
        ~300k strings); it runs over the buffer until ``unpack_from`` falls off its end,
        then the cursor refills, asking for about as many bytes as the strings walked so
        far suggest the rest will take. String bodies that run past the buffer are
        skipped without being fetched.
        """
        cur = self.cur
        unpack = _U64.unpack_from
        start = cur.pos
        done = 0
        while done < count:
            per_item = (cur.pos - start) // done if done else 16
            off = cur.fill(8, (count - done) * per_item * 17 // 16)  # later strings run longer
            buf, i, k, length = cur.buf, off, done, 0
            try:  # a for loop over a range runs this ~1.7x faster than a while loop
                for k in range(done, count):  # noqa: B007 (k counts the strings walked)
                    (length,) = unpack(buf, i)
                    i += 8 + length
                k = count
            except (struct.error, OverflowError):
                pass  # fewer than 8 bytes left in the buffer (or i is absurd): see below
            cur.pos = cur.buf_start + i
            if i > len(buf):  # string #k-1 runs past the buffer: is its length possible?
                outer, cur.what = cur.what, f"string #{k - 1} of {key!r}"
                if length > MAX_STRING_BYTES:
                    at = cur.pos - length - 8
                    raise self.error(
                        f"{cur.what} claims {length:,} bytes (offset {at}); the header is corrupt"
                    )
                cur.pos -= length
                cur.skip(length)
                cur.what = outer
            done = k

    # -- tensor infos -----------------------------------------------------------------

    def tensor_infos(self, n_tensors: int, alignment: int) -> TensorTable:
        """The tensor-info table: records wholly in the buffer and plainly sound are read in
        bulk (:mod:`~homelab.gguf.tensor_records`); the first that is not is read by
        :meth:`tensor_info`, which refills the buffer or raises the error there."""
        cur = self.cur
        start = cur.pos
        table = TensorTable()
        with collector_paused():  # 40k tensors are thousands of objects, none in a cycle
            while len(table) < n_tensors:
                index = len(table)
                cur.pos = bulk_tensor_infos(cur, n_tensors, alignment, table)
                if len(table) == index:  # not one record in the fast loop: read it carefully
                    table.add(self.tensor_info(index, n_tensors, start, alignment, table))
        return table

    def tensor_info(
        self, index: int, n_tensors: int, start: int, alignment: int, table: TensorTable
    ) -> TensorInfo:
        """Tensor info ``index``, every check in order, each with its own message."""
        cur = self.cur
        cur.what = f"tensor info #{index}"
        per_item = (cur.pos - start) // index if index else _TENSOR_INFO_GUESS
        name = self.string(MAX_KEY_BYTES, (n_tensors - index) * per_item)
        if table.has_name(name):
            raise self.error(
                f"tensor {name!r} appears twice (tensor info #{index}); "
                "llama.cpp refuses such a file"
            )
        cur.what = f"tensor info #{index} ({name!r})"
        n_dims = self.u32()
        if n_dims > MAX_DIMS:
            raise self.error(
                f"tensor {name!r} has {n_dims} dimensions (offset "
                f"{cur.pos - 4}); ggml tensors have at most {MAX_DIMS}"
            )
        off = cur.fill(8 * n_dims + 12)
        shape = struct.unpack_from(f"<{n_dims}QIQ", cur.buf, off)
        cur.pos += 8 * n_dims + 12
        dims, ggml_type, offset = shape[:n_dims], shape[n_dims], shape[n_dims + 1]
        return self.tensor(name, dims, ggml_type, offset, alignment)

    def tensor(
        self, name: str, dims: tuple[int, ...], ggml_type: int, offset: int, alignment: int
    ) -> TensorInfo:
        elements = 1
        for dim in dims:
            elements *= dim
        if elements > INT64_MAX or any(d > INT64_MAX for d in dims):
            raise self.error(f"tensor {name!r} has an impossible shape {list(dims)}")
        if offset % alignment:
            raise self.error(
                f"tensor {name!r} starts at data offset {offset}, which is not a "
                f"multiple of the alignment {alignment}; the header is corrupt"
            )
        try:
            n_bytes = tensor_bytes(ggml_type, dims)
        except ValueError as exc:
            raise self.error(
                f"tensor {name!r} ({type_name(ggml_type)}, shape {list(dims)}): {exc}"
            ) from None
        return TensorInfo(name, dims, ggml_type, type_name(ggml_type), offset, n_bytes)
