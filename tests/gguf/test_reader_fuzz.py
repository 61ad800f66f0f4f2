"""Fuzz read_header: mutated real headers and random bytes give a header or a ModelFileError.

Never any other exception (no struct.error, IndexError, UnicodeDecodeError, MemoryError).
"""

from __future__ import annotations

import struct

import pytest
from gguf_bytes import (
    QT,
    VT,
    UnknownSizeSource,
    array_payload,
    gstr,
    header,
    kv,
    kv_str,
    kv_u32,
    tensor_info,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader
from homelab.gguf.reader import read_header
from homelab.gguf.source import BytesSource

SEED = header(
    [
        kv_str("general.architecture", "llama"),
        kv_u32("llama.block_count", 2),
        kv("llama.rope.freq_base", VT.FLOAT32, struct.pack("<f", 10000.0)),
        kv(
            "llama.attention.head_count_kv",
            VT.ARRAY,
            array_payload(VT.INT32, 2, struct.pack("<2i", 8, 0)),
        ),
        kv(
            "tokenizer.ggml.tokens",
            VT.ARRAY,
            array_payload(VT.STRING, 4100, b"".join(gstr(f"t{i % 50}") for i in range(4100))),
        ),
        kv(
            "tokenizer.ggml.token_type", VT.ARRAY, array_payload(VT.INT32, 4100, b"\1\0\0\0" * 4100)
        ),
        kv(
            "nested",
            VT.ARRAY,
            array_payload(
                VT.ARRAY,
                2,
                array_payload(VT.BOOL, 1, b"\1") + array_payload(VT.STRING, 1, gstr("z")),
            ),
        ),
        kv("general.alignment", VT.UINT32, struct.pack("<I", 64)),
    ],
    [
        tensor_info("token_embd.weight", (64, 10), QT.Q8_0, 0),
        tensor_info("blk.0.attn_q.weight", (256, 4), QT.Q4_K, 704),
        tensor_info("output_norm.weight", (64,), QT.F32, 1344),
    ],
)

INTERESTING_WORDS = [0, 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 4100, 10**9]
FUZZ = settings(
    max_examples=300,
    derandomize=True,  # the same examples every run: a failure is reproducible, never flaky
    deadline=None,  # speed is measured in bench/, not asserted by a busy CI machine's clock
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def parse_somehow(data: bytes, sized: bool) -> GgufHeader | None:
    source = BytesSource(data, "fuzz.gguf") if sized else UnknownSizeSource(data, "fuzz.gguf")
    try:
        return read_header(source)
    except ModelFileError as exc:
        assert "fuzz.gguf" in exc.message
        return None


def test_seed_is_a_valid_header() -> None:
    parsed = read_header(BytesSource(SEED))
    assert parsed.header_bytes == len(SEED) and parsed.alignment == 64
    assert parsed.weights_bytes == 680 + 576 + 256


@st.composite
def mutated_seed(draw: st.DrawFn) -> bytes:
    data = bytearray(SEED)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "overwrite", "word", "delete", "insert"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite":
            data[at] = draw(st.integers(0, 255))
        elif kind == "word":  # a count/length field set to something interesting
            value = draw(st.sampled_from(INTERESTING_WORDS))
            data[at : at + 8] = value.to_bytes(8, "little")
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 64))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
    cut = draw(st.one_of(st.none(), st.integers(0, len(data))))
    return bytes(data if cut is None else data[:cut])


@FUZZ
@given(data=mutated_seed(), sized=st.booleans())
def test_mutated_headers_never_escape_as_other_exceptions(data: bytes, sized: bool) -> None:
    parse_somehow(data, sized)


@FUZZ
@given(data=st.binary(max_size=4096), sized=st.booleans())
def test_random_bytes_are_rejected_cleanly(data: bytes, sized: bool) -> None:
    parse_somehow(data, sized)


@FUZZ
@given(
    body=st.binary(max_size=2048),
    version=st.sampled_from([2, 3]),
    counts=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    sized=st.booleans(),
)
def test_random_bodies_after_a_valid_preamble(
    body: bytes, version: int, counts: tuple[int, int], sized: bool
) -> None:
    data = b"GGUF" + struct.pack("<IQQ", version, *counts) + body
    parsed = parse_somehow(data, sized)
    if parsed is not None:
        assert len(parsed.tensors) == counts[0] and len(parsed.metadata) == counts[1]
        assert parsed.header_bytes <= len(data)


@pytest.mark.parametrize("cut", [len(SEED) // 3, len(SEED) - 1])
def test_cut_seed_is_rejected(cut: int) -> None:
    assert parse_somehow(SEED[:cut], True) is None
    assert parse_somehow(SEED[:cut], False) is None
