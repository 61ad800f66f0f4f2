"""Blocks written alike are read whole: the table must hold exactly what reading every record
on its own gives, and refuse exactly what it refuses.

The bulk reader matches a block against the records of a block it read before (names but
for the number, shapes, types) and checks names and offsets once for the whole run; so
tables whose blocks are written in two alternating ways (a Q4_K_M mix), blocks numbered
``01`` beside ``1``, and a name repeated in a block read whole are the cases to hold it to.
"""

from __future__ import annotations

import struct

import pytest
from gguf_bytes import QT, header, tensor_info

from homelab.errors import ModelFileError
from homelab.gguf.reader import read_header
from homelab.gguf.source import BytesSource
from homelab.gguf.tensor_info import TensorInfo
from homelab.gguf.tensor_table import TensorTable

N_BLOCKS = 300
RECORDS = (
    ("attn_norm.weight", (512,)),
    ("ffn_up_exps.weight", (512, 256, 8)),
    ("ffn_down.weight", (256, 512)),
)
SIZES = {QT.F32: (1, 4), QT.Q4_K: (256, 144), QT.Q6_K: (256, 210)}


def _type(block: int, record: int) -> int:
    """F32 norms; the down projection Q6_K in every third block (a Q4_K_M's mix), else Q4_K."""
    if record == 0:
        return int(QT.F32)
    return int(QT.Q6_K if record == 2 and block % 3 == 2 else QT.Q4_K)


def _records(number: dict[int, str] | None = None) -> list[tuple[str, tuple[int, ...], int, int]]:
    """(name, dims, type, offset) of a table: a loose head, ``N_BLOCKS`` blocks, a loose tail;
    ``number`` spells some blocks' numbers otherwise."""
    out = [("token_embd.weight", (512, 1000), int(QT.F32), 0)]
    offset = 512 * 1000 * 4
    for block in range(N_BLOCKS):
        spelled = (number or {}).get(block, str(block))
        for record, (rest, dims) in enumerate(RECORDS):
            ggml_type = _type(block, record)
            out.append((f"blk.{spelled}.{rest}", dims, ggml_type, offset))
            elements = 1
            for dim in dims:
                elements *= dim
            block_size, type_size = SIZES[QT(ggml_type)]
            offset += -(-(elements // block_size * type_size) // 32) * 32
    out.append(("output.weight", (512, 1000), int(QT.F32), offset))
    return out


def _bytes(records: list[tuple[str, tuple[int, ...], int, int]]) -> bytes:
    return header([], [tensor_info(*record) for record in records])


def _read(data: bytes) -> TensorTable:
    table = read_header(BytesSource(data, "blocks.gguf")).tensors
    assert isinstance(table, TensorTable)
    return table


def _expected(records: list[tuple[str, tuple[int, ...], int, int]]) -> list[TensorInfo]:
    """What the careful reader makes of each record alone."""
    return [read_header(BytesSource(_bytes([r]), "one.gguf")).tensors[0] for r in records]


def test_blocks_written_in_two_ways_read_as_every_record_alone() -> None:
    records = _records()
    table = _read(_bytes(records))
    assert list(table) == _expected(records)
    assert [table[i] for i in (0, 1, 5, len(records) - 1)] == [
        list(table)[i] for i in (0, 1, 5, len(records) - 1)
    ]
    # the groups hold what filing every tensor one by one gives
    alone = TensorTable.from_infos(_expected(records))
    assert _groups(table) == _groups(alone)
    assert [t.name for t in table.loose] == ["token_embd.weight", "output.weight"]
    assert table.weights_bytes == alone.weights_bytes
    assert table.max_block() == N_BLOCKS - 1


def _groups(table: TensorTable) -> dict[tuple[str, int], list[tuple[int, int]]]:
    return {
        (g.rest, g.shape.ggml_type): sorted(zip(g.blocks, g.offsets, strict=True))
        for g in table.groups
    }


def test_a_block_numbered_07_beside_7_is_no_repeat() -> None:
    """``blk.07.`` and ``blk.7.`` are two names (llama.cpp reads both as block 7)."""
    records = _records({8: "07"})
    names = [r[0] for r in records]
    assert len(set(names)) == len(names) and {
        "blk.7.attn_norm.weight",
        "blk.07.attn_norm.weight",
    } <= set(names)
    table = _read(_bytes(records))
    assert list(table) == _expected(records)
    assert _groups(table) == _groups(TensorTable.from_infos(_expected(records)))


@pytest.mark.parametrize("at", [10, 150, 3 * N_BLOCKS - 1])
def test_a_name_repeated_in_a_block_read_whole_is_refused_at_its_record(at: int) -> None:
    records = _records()
    block = (at - 1) // len(RECORDS)
    records = [
        (name.replace(f"blk.{block}.", "blk.0.", 1), dims, ggml_type, offset)
        if i - 1 in range(block * len(RECORDS), (block + 1) * len(RECORDS))
        else (name, dims, ggml_type, offset)
        for i, (name, dims, ggml_type, offset) in enumerate(records)
    ]
    first = 1 + block * len(RECORDS)  # the first record of the renamed block
    with pytest.raises(ModelFileError, match=rf"appears twice \(tensor info #{first}\)"):
        _read(_bytes(records))


def test_a_misaligned_offset_in_a_block_read_whole_is_refused_at_its_record() -> None:
    records = _records()
    at = 1 + 200 * len(RECORDS) + 1
    name, dims, ggml_type, offset = records[at]
    records[at] = (name, dims, ggml_type, offset + 8)
    with pytest.raises(ModelFileError, match=rf"'{name}' starts at data offset {offset + 8}"):
        _read(_bytes(records))


def test_a_table_cut_inside_a_block_names_the_record() -> None:
    records = _records()
    data = _bytes(records)
    at = 1 + (N_BLOCKS - 5) * len(RECORDS) + 1  # late enough that the counts still fit
    pos = 24
    for _ in range(at):
        (length,) = struct.unpack_from("<Q", data, pos)
        (n_dims,) = struct.unpack_from("<I", data, pos + 8 + length)
        pos += 8 + length + 4 + 8 * n_dims + 12
    with pytest.raises(ModelFileError, match=rf"tensor info #{at} \('{records[at][0]}'\)"):
        _read(data[: pos + 8 + len(records[at][0]) + 4 + 3])  # inside its dims
