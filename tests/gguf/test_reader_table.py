"""A long tensor-info table: the reader's bulk loop and its careful per-record reader agree.

The bulk loop reads the records that lie wholly in the buffer and are plainly sound; the
first that is not goes to the careful reader. So a bad or unusual record deep in a
table of a thousand must be read (or refused) exactly as it would be alone: the same
values, the same message naming the same record and offset.
"""

from __future__ import annotations

import gc
import struct

import gguf
import pytest
from gguf_bytes import QT, UnknownSizeSource, gstr, header, tensor_info

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader
from homelab.gguf.reader import read_header
from homelab.gguf.source import BytesSource

N = 1000
AT = 700
"""Where the odd record sits among the ``N``."""


def _good(index: int) -> tuple[str, tuple[int, ...], int, int]:
    """Record ``index`` of a MoE-like table: block tensors of 1 to 3 dims, quantized or not."""
    kinds = [
        ((512,), QT.F32),
        ((512, 256), QT.Q4_K),
        ((256, 512, 8), QT.Q6_K),
        ((512, 64), QT.Q8_0),
    ]
    dims, ggml_type = kinds[index % len(kinds)]
    return f"blk.{index // 4}.t{index % 4}.weight", dims, int(ggml_type), index * 4096


def _size(dims: tuple[int, ...], ggml_type: int) -> int:
    block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    elements = 1
    for dim in dims:
        elements *= dim
    return elements // block * type_size


def _table(odd: bytes | None = None) -> bytes:
    records = [tensor_info(*_good(i)) for i in range(N)]
    if odd is not None:
        records[AT] = odd
    return header([], records)


def _parse(data: bytes, *, sized: bool = True) -> GgufHeader:
    source = BytesSource(data, "table.gguf") if sized else UnknownSizeSource(data, "table.gguf")
    return read_header(source)


def _offset_of(index: int, data: bytes) -> int:
    """Where tensor info ``index`` starts in ``data`` (no metadata: right after the preamble)."""
    pos = 24
    for _ in range(index):
        (length,) = struct.unpack_from("<Q", data, pos)
        (n_dims,) = struct.unpack_from("<I", data, pos + 8 + length)
        pos += 8 + length + 4 + 8 * n_dims + 12
    return pos


@pytest.mark.parametrize("sized", [True, False])
def test_every_record_of_a_long_table_is_read(sized: bool) -> None:
    parsed = _parse(_table(), sized=sized)
    assert len(parsed.tensors) == N
    for index, tensor in enumerate(parsed.tensors):
        name, dims, ggml_type, offset = _good(index)
        assert (tensor.name, tensor.shape, tensor.ggml_type, tensor.offset) == (
            name,
            dims,
            ggml_type,
            offset,
        )
        assert tensor.type_name == gguf.GGMLQuantizationType(ggml_type).name
        assert tensor.n_bytes == _size(dims, ggml_type)


@pytest.mark.parametrize(
    "odd",
    [
        tensor_info("odd", (10,), 99, AT * 4096),  # an unknown type: read, size unknown
        tensor_info("empty", (512, 0), QT.Q4_K, AT * 4096),  # no elements at all
        tensor_info("scalar", (), QT.F32, AT * 4096),  # no dimensions
        tensor_info("ü-name", (512,), QT.F32, AT * 4096),  # not ASCII
        gstr(b"bad\xffutf8") + struct.pack("<I2QIQ", 2, 512, 4, QT.F16, AT * 4096),
    ],
)
def test_an_unusual_record_in_the_middle_reads_as_alone(odd: bytes) -> None:
    alone = _parse(header([], [odd])).tensors[0]
    found = _parse(_table(odd)).tensors
    assert found[AT] == alone._replace(offset=AT * 4096)
    assert [t.name for t in found] == [alone.name if i == AT else _good(i)[0] for i in range(N)]
    assert found[AT + 1].n_bytes == _size(_good(AT + 1)[1], _good(AT + 1)[2])


@pytest.mark.parametrize(
    ("odd", "message"),
    [
        (tensor_info("q", (33, 2), QT.Q8_0, 0), r"tensor 'q' \(Q8_0, shape \[33, 2\]\): first"),
        (tensor_info("q", (1, 1, 1, 1, 1), QT.F32, 0), r"tensor 'q' has 5 dimensions \(offset "),
        (tensor_info("q", (2**63, 2), QT.F32, 0), r"tensor 'q' has an impossible shape"),
        (tensor_info("q", (2**62, 4), QT.F32, 0), r"tensor 'q' has an impossible shape"),
        (tensor_info("q", (8,), QT.F32, 7), r"tensor 'q' starts at data offset 7, which is not"),
        (tensor_info("blk.0.t1.weight", (8,), QT.F32, 0), r"'blk.0.t1.weight' appears twice"),
        (gstr("x" * 70_000) + b"\0" * 64, r"tensor info #700 has a string of 70,000 bytes"),
    ],
)
def test_a_bad_record_in_the_middle_is_refused_as_alone(odd: bytes, message: str) -> None:
    data = _table(odd)
    with pytest.raises(ModelFileError, match=message) as refused:
        _parse(data)
    if "dimensions" in message:  # the offset named is that of the count in record 700
        at = _offset_of(AT, data) + 8 + 1
        assert f"(offset {at})" in refused.value.message
    if "appears twice" in message:
        assert "(tensor info #700)" in refused.value.message


@pytest.mark.parametrize("sized", [True, False])
def test_a_table_cut_inside_a_record_names_it(sized: bool) -> None:
    data = _table()
    cut = _offset_of(AT, data) + 30  # inside record 700's dims
    with pytest.raises(ModelFileError, match=r"tensor info #700 \('blk.175.t0.weight'\)"):
        _parse(data[:cut], sized=sized)


@pytest.mark.parametrize("was_on", [True, False])
def test_the_collector_is_left_as_it_was_after_a_read_or_a_refusal(was_on: bool) -> None:
    """The table is read with the cyclic collector paused; it must come back on (only if it
    was on) whether the read ends well or with a refusal deep in the table."""
    bad = _table(tensor_info("q", (8,), QT.F32, 7))
    (gc.enable if was_on else gc.disable)()
    try:
        assert len(_parse(_table()).tensors) == N
        assert gc.isenabled() is was_on
        with pytest.raises(ModelFileError, match="not a multiple of the alignment"):
            _parse(bad)
        assert gc.isenabled() is was_on
    finally:
        gc.enable()
