"""read_header against gguf-py's writer and reader, hand-crafted bad headers, and the cursor."""

from __future__ import annotations

import re
import struct
import time
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf_bytes import (
    ABSURD,
    QT,
    RICH_ARRAYS,
    RICH_LAZY,
    RICH_NESTED,
    RICH_SCALARS,
    RICH_TENSORS,
    VT,
    CountingSource,
    UnknownSizeSource,
    array_payload,
    gstr,
    header,
    kv,
    kv_str,
    kv_u32,
    preamble,
    tensor_info,
    write_rich_gguf,
)

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader, LazyArray
from homelab.gguf.reader import (
    LAZY_ARRAY_ITEMS,
    MAX_ARRAY_ITEMS,
    MAX_TENSORS,
    read_header,
)
from homelab.gguf.source import BytesSource, LocalFileSource


def parse_file(path: Path) -> GgufHeader:
    with LocalFileSource(path) as source:
        return read_header(source)


def parse_bytes(data: bytes, name: str = "crafted.gguf") -> GgufHeader:
    return read_header(BytesSource(data, name))


def same_header(a: GgufHeader, b: GgufHeader) -> None:
    assert a.version == b.version
    assert a.metadata == b.metadata
    assert a.tensors == b.tensors
    assert a.alignment == b.alignment
    assert (a.header_bytes, a.data_offset) == (b.header_bytes, b.data_offset)


@pytest.fixture(scope="module")
def rich(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rich_gguf(tmp_path_factory.mktemp("rich") / "rich.gguf")


# -- agreement with gguf-py ---------------------------------------------------------------


def test_every_scalar_type_is_decoded(rich: Path) -> None:
    meta = parse_file(rich).metadata
    for key, (_, value) in RICH_SCALARS.items():
        if isinstance(value, float):
            assert meta[key] == pytest.approx(value, rel=1e-7), key
        else:
            assert meta[key] == value and type(meta[key]) is type(value), key
    assert meta["general.architecture"] == "llama"
    assert meta["general.name"] == "rich test model"


def test_small_arrays_are_lists_and_nested_arrays_keep_their_shape(rich: Path) -> None:
    meta = parse_file(rich).metadata
    for key, (vtype, items) in RICH_ARRAYS.items():
        assert isinstance(meta[key], list), key
        if vtype == VT.FLOAT32:
            assert meta[key] == pytest.approx(items, rel=1e-7)
        else:
            assert meta[key] == items, key
    for key, nested in RICH_NESTED.items():
        assert meta[key] == nested, key


def test_metadata_equals_what_gguf_reader_decodes(rich: Path) -> None:
    ours = parse_file(rich).metadata
    theirs = gguf.GGUFReader(rich).fields
    compared = 0
    for key, field in theirs.items():
        if key.startswith("GGUF.") or key in RICH_NESTED:  # GGUFReader flattens nested arrays
            continue
        if isinstance(ours[key], LazyArray):
            assert len(ours[key]) == len(field.data), key
            # the first item starts after: key string, value type, item type, count
            assert ours[key].offset == field.offset + 8 + len(key) + 4 + 4 + 8, key
            assert ours[key].item_type == field.types[-1], key
        else:
            assert ours[key] == field.contents(), key
        compared += 1
    assert compared == len(ours) - len(RICH_NESTED)


def test_big_arrays_are_lazy_and_not_decoded(rich: Path) -> None:
    meta = parse_file(rich).metadata
    for key, (vtype, items) in RICH_LAZY.items():
        assert len(items) > LAZY_ARRAY_ITEMS
        lazy = meta[key]
        assert isinstance(lazy, LazyArray)
        assert (lazy.item_type, lazy.count, len(lazy)) == (vtype, len(items), len(items))
    assert isinstance(meta["test.arr.small4096"], list)


def test_tensors_and_sizes_equal_gguf_reader(rich: Path) -> None:
    ours = parse_file(rich)
    theirs = gguf.GGUFReader(rich)
    assert len(ours.tensors) == len(theirs.tensors) == len(RICH_TENSORS)
    for mine, ref in zip(ours.tensors, theirs.tensors, strict=True):
        assert mine.name == ref.name
        assert list(mine.shape) == [int(d) for d in ref.shape]
        assert mine.ggml_type == int(ref.tensor_type)
        assert mine.type_name == ref.tensor_type.name
        assert mine.n_bytes == int(ref.n_bytes)
        assert ours.data_offset + mine.offset == ref.data_offset
    assert ours.weights_bytes == sum(int(t.n_bytes) for t in theirs.tensors)
    assert {t.type_name for t in ours.tensors} >= {"Q4_K", "Q8_0", "Q4_0", "Q6_K", "F16", "F32"}
    assert ours.data_offset == theirs.data_offset
    assert ours.alignment == 32
    assert ours.header_bytes <= ours.data_offset < ours.header_bytes + 32
    assert ours.file_size == rich.stat().st_size
    assert ours.version == 3 and ours.arch == "llama"


def test_custom_alignment(tmp_path: Path) -> None:
    path = write_rich_gguf(tmp_path / "aligned.gguf", alignment=256)
    ours, theirs = parse_file(path), gguf.GGUFReader(path)
    assert ours.alignment == 256 and ours.metadata["general.alignment"] == 256
    assert ours.data_offset % 256 == 0 and ours.data_offset == theirs.data_offset
    assert all(t.offset % 256 == 0 for t in ours.tensors)
    starts = [t.data_offset for t in theirs.tensors]
    assert [ours.data_offset + t.offset for t in ours.tensors] == starts


@pytest.mark.parametrize("alignment", [0, 3, 48])
def test_alignment_must_be_a_power_of_two(alignment: int) -> None:
    data = header([kv_u32("general.alignment", alignment)], [])
    with pytest.raises(ModelFileError, match="power of two"):
        parse_bytes(data)


# -- truncation -------------------------------------------------------------------------


def test_file_cut_after_the_header_parses_like_the_full_file(rich: Path, tmp_path: Path) -> None:
    full = parse_file(rich)
    raw = rich.read_bytes()
    for cut in (full.header_bytes, full.data_offset):
        short = tmp_path / f"cut{cut}.gguf"
        short.write_bytes(raw[:cut])
        same_header(parse_file(short), full)


def test_every_cut_inside_the_header_is_a_model_file_error() -> None:
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_u32("llama.block_count", 2),
        kv("tok", VT.ARRAY, array_payload(VT.STRING, 3, gstr("a") + gstr("bc") + gstr(""))),
        kv("big", VT.ARRAY, array_payload(VT.STRING, 5000, gstr("xy") * 5000)),
        kv("ints", VT.ARRAY, array_payload(VT.INT32, 5000, b"\1\0\0\0" * 5000)),
    ]
    tensors = [tensor_info("a", (64, 2), QT.F32, 0), tensor_info("b", (32,), QT.Q8_0, 512)]
    data = header(kvs, tensors)
    whole = parse_bytes(data)
    assert whole.header_bytes == len(data)
    # every byte near a boundary between pieces, every 41st byte elsewhere
    bounds, at = [0, 24], 24
    for piece in kvs + tensors:
        at += len(piece)
        bounds.append(at)
    near = {b + d for b in bounds for d in range(-40, 40)}
    for cut in sorted(c for c in set(range(0, len(data), 41)) | near if 0 <= c < len(data)):
        piece = data[:cut]
        for source in (BytesSource(piece, "cut.gguf"), UnknownSizeSource(piece, "cut.gguf")):
            with pytest.raises(ModelFileError, match=r"cut\.gguf"):
                read_header(source)


def test_truncation_message_names_the_place(rich: Path, tmp_path: Path) -> None:
    full = parse_file(rich)
    short = tmp_path / "short.gguf"
    short.write_bytes(rich.read_bytes()[: full.header_bytes - 5])
    with pytest.raises(ModelFileError, match=r"short\.gguf.*(truncated|remain)") as caught:
        parse_file(short)
    assert "tensor info" in str(caught.value)
    assert caught.value.exit_code == 4


# -- foreign files, versions -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (b"", "empty"),
        (b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "PNG"),
        (b"hello, this is a text file\n", r"68 65 6c 6c 6f"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\n", "Git LFS"),
        (b"GG", "not a GGUF"),
        (b"tjgg" + b"\0" * 100, "pre-GGUF"),
    ],
)
def test_foreign_files_are_rejected_with_their_first_bytes(data: bytes, pattern: str) -> None:
    with pytest.raises(ModelFileError, match=pattern) as caught:
        parse_bytes(data, "foreign.bin")
    assert "foreign.bin" in caught.value.message


@pytest.mark.parametrize(
    ("version_bytes", "pattern"),
    [
        (struct.pack("<I", 1), "version 1"),
        (struct.pack("<I", 4), "unsupported GGUF version 4"),
        (struct.pack(">I", 3), "big-endian"),
        (struct.pack(">I", 2), "big-endian"),
    ],
)
def test_unreadable_versions(version_bytes: bytes, pattern: str) -> None:
    data = b"GGUF" + version_bytes + b"\0" * 40
    with pytest.raises(ModelFileError, match=pattern):
        parse_bytes(data)


def test_version_2_is_read_like_version_3() -> None:
    kvs = [kv_str("general.architecture", "qwen2")]
    tensors = [tensor_info("w", (32, 4), QT.Q4_0, 0)]
    v2, v3 = parse_bytes(header(kvs, tensors, version=2)), parse_bytes(header(kvs, tensors))
    assert (v2.version, v3.version) == (2, 3)
    assert v2.metadata == v3.metadata and v2.tensors == v3.tensors
    assert v2.weights_bytes == 4 * 18


# -- hand-crafted problems --------------------------------------------------------------


def test_unknown_tensor_type_gives_unknown_size() -> None:
    data = header([], [tensor_info("odd", (10,), 99, 0), tensor_info("w", (4,), QT.F32, 32)])
    parsed = parse_bytes(data)
    assert parsed.tensors[0].type_name == "type_99" and parsed.tensors[0].n_bytes is None
    assert parsed.tensors[1].n_bytes == 16
    assert parsed.weights_bytes is None


@pytest.mark.parametrize(
    ("tensor", "pattern"),
    [
        (tensor_info("q", (33, 2), QT.Q8_0, 0), "block size 32"),
        (tensor_info("q", (1, 1, 1, 1, 1), QT.F32, 0), "5 dimensions"),
        (tensor_info("q", (2**63, 2), QT.F32, 0), "impossible shape"),
        (tensor_info("q", (8,), QT.F32, 7), "not a multiple of the alignment"),
    ],
)
def test_bad_tensor_infos(tensor: bytes, pattern: str) -> None:
    with pytest.raises(ModelFileError, match=pattern):
        parse_bytes(header([], [tensor]))


def test_duplicates_are_rejected() -> None:
    with pytest.raises(ModelFileError, match="appears twice"):
        parse_bytes(header([kv_u32("a", 1), kv_u32("a", 2)], []))
    with pytest.raises(ModelFileError, match="appears twice"):
        parse_bytes(header([], [tensor_info("t", (4,), 0, 0), tensor_info("t", (4,), 0, 32)]))


def test_unknown_value_types_are_rejected() -> None:
    with pytest.raises(ModelFileError, match="unknown value type 13"):
        parse_bytes(header([kv("k", 13, b"\0" * 8)], []))
    with pytest.raises(ModelFileError, match="unknown item type 42"):
        parse_bytes(header([kv("k", VT.ARRAY, array_payload(42, 1, b"\0" * 8))], []))


def test_empty_array_and_zero_dim_tensor() -> None:
    parsed = parse_bytes(
        header(
            [kv("k", VT.ARRAY, array_payload(VT.UINT8, 0, b""))],
            [tensor_info("scalar", (), QT.F32, 0)],
        )
    )
    assert parsed.metadata["k"] == []
    assert parsed.tensors[0].shape == () and parsed.tensors[0].n_bytes == 4


def test_nesting_is_bounded() -> None:
    payload = b""
    inner = array_payload(VT.UINT8, 1, b"\1")
    for _ in range(20):
        inner = array_payload(VT.ARRAY, 1, inner)
    payload = inner
    with pytest.raises(ModelFileError, match="nests arrays"):
        parse_bytes(header([kv("deep", VT.ARRAY, payload)], []))


@pytest.mark.parametrize("sized", [True, False], ids=["size known", "size unknown"])
@pytest.mark.parametrize("case", sorted(ABSURD))
def test_absurd_counts_fail_fast_in_little_memory(case: str, sized: bool) -> None:
    data, pattern = ABSURD[case]
    source = BytesSource(data, "absurd.gguf") if sized else UnknownSizeSource(data, "absurd.gguf")
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(ModelFileError, match=r"absurd\.gguf") as caught:
            read_header(source)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert re.search(pattern, caught.value.message), caught.value.message
    assert peak < 5 * 1024**2, f"{case}: peak {peak} bytes"
    assert elapsed < 1.0, f"{case}: {elapsed:.3f} s"


def test_truncation_after_a_skipped_array_says_where_the_file_ends() -> None:
    data = preamble(0, 1) + gstr("k") + struct.pack("<IIQ", VT.ARRAY, VT.UINT64, 10**7)
    # longer than the first read, so the source's end is not seen before the skip
    with pytest.raises(
        ModelFileError,
        match=r"at offset 49 needs bytes up to 80000049, but the "
        r"file ends before byte 80000048",
    ):
        read_header(UnknownSizeSource(data + b"\0" * 100_000, "x.gguf"))
    with pytest.raises(ModelFileError, match=r"would take at least 80,000,000 bytes, but only 100"):
        read_header(UnknownSizeSource(data + b"\0" * 100, "x.gguf"))  # a short read: size known
    with pytest.raises(ModelFileError, match=r"at least 104,857,600 bytes, but only 0 remain"):
        read_header(UnknownSizeSource(ABSURD["100 MB string value"][0], "x.gguf"))


def test_limits_are_far_above_real_models() -> None:
    assert MAX_TENSORS >= 100_000  # DeepSeek-V3 with unmerged experts has ~47k tensors
    assert MAX_ARRAY_ITEMS >= 4_000_000  # the biggest vocabularies are ~260k tokens


# -- the cursor: few reads, little beyond the header -------------------------------------


def write_big_vocab(path: Path, n_tokens: int, *, with_types: bool) -> Path:
    writer = gguf.GGUFWriter(path, "qwen2")
    tokens = [f"Ġtoken{i}" * (1 + i % 3) for i in range(n_tokens)]
    writer.add_token_list(tokens)
    if with_types:  # a numeric array the cursor can skip without fetching
        writer.add_token_types([1] * n_tokens)
    writer.add_token_merges([f"Ġ t{i}" for i in range(n_tokens)])
    writer.add_string("tokenizer.chat_template", "{{ x }}" * 1000)
    for layer in range(40):
        for part in ("attn_q", "attn_k", "attn_v", "ffn_up", "ffn_down"):
            writer.add_tensor_info(
                f"blk.{layer}.{part}.weight",
                (256, 256),
                np.dtype(np.float16),
                256 * 144,
                raw_dtype=QT.Q4_K,
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("with_types", [True, False], ids=["with token types", "strings only"])
@pytest.mark.parametrize("sized", [True, False], ids=["size known", "size unknown"])
def test_big_header_is_fetched_in_few_reads_and_little_more_than_its_size(
    tmp_path: Path, with_types: bool, sized: bool
) -> None:
    path = write_big_vocab(tmp_path / "vocab.gguf", 60_000, with_types=with_types)
    source = BytesSource(path.read_bytes(), str(path))
    counting = CountingSource(source if sized else UnknownSizeSource(path.read_bytes()))
    parsed = read_header(counting)
    stats = parsed.extra["read_stats"]
    assert stats.reads == len(counting.calls)
    assert stats.bytes_read == sum(got for _, _, got in counting.calls)
    assert parsed.header_bytes > 2_000_000
    assert stats.bytes_read <= 1.1 * parsed.header_bytes
    assert stats.reads <= 8
    assert len(parsed.metadata["tokenizer.ggml.tokens"]) == 60_000
    assert len(parsed.tensors) == 200
    # reads never overlap: every byte is fetched at most once
    ends = [off + got for off, _, got in counting.calls]
    assert all(off >= end for (off, _, _), end in zip(counting.calls[1:], ends, strict=False))


def test_small_header_is_one_read(rich: Path) -> None:
    with LocalFileSource(rich) as local:
        counting = CountingSource(local)
        parsed = read_header(counting)
    assert parsed.extra["read_stats"].reads == len(counting.calls) <= 2
