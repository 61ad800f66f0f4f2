"""ggml type table, row and tensor byte arithmetic, and cache-type spellings."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import gguf
import pytest
from gguf_bytes import QT, RICH_TENSORS

from homelab.gguf import ggml_table
from homelab.gguf.ggml_types import (
    GGML_TYPES,
    ggml_type,
    row_bytes,
    tensor_bytes,
    type_name,
)
from homelab.plan.kv import CACHE_TYPES


def test_ggml_table_follows_the_gguf_package() -> None:
    for member, (block, size) in gguf.GGML_QUANT_SIZES.items():
        kind = GGML_TYPES[int(member)]
        assert (kind.name, kind.block_size, kind.type_size) == (member.name, block, size)
    known = {int(member) for member in gguf.GGML_QUANT_SIZES}
    assert set(GGML_TYPES) == known, "the table holds a type the gguf package does not size"


def test_committed_table_is_what_the_generator_writes() -> None:
    """``homelab/gguf/ggml_table.py`` is generated; after a ``gguf`` upgrade this fails
    until ``python tools/gen_ggml_table.py`` is run (and catches hand edits)."""
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "gen_ggml_table", root / "tools/gen_ggml_table.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert Path(ggml_table.__file__).read_text() == generator.render()
    assert len(ggml_table.GGML_TYPE_ROWS) == len(gguf.GGML_QUANT_SIZES) > 30


@pytest.mark.parametrize(
    ("name", "n", "expected"),
    [
        ("f32", 4096, 16384),
        ("f16", 4096, 8192),
        ("bf16", 128, 256),
        ("q8_0", 4096, 4352),
        ("Q8_0", 32, 34),
        ("q4_0", 128, 72),
        ("iq4_nl", 64, 36),
        ("q5_1", 32, 24),
        ("q5_0", 32, 22),
        ("q4_1", 32, 20),
        (8, 64, 68),
    ],
)
def test_row_bytes(name: str | int, n: int, expected: int) -> None:
    assert row_bytes(name, n) == expected


def test_every_kv_cache_spelling_is_known() -> None:
    for spelling in CACHE_TYPES:
        assert type_name(ggml_type(spelling).type_id).lower() == spelling


def test_type_errors() -> None:
    with pytest.raises(ValueError, match="q9_0"):
        ggml_type("q9_0")
    with pytest.raises(ValueError, match="multiple"):
        row_bytes("q8_0", 33)
    with pytest.raises(ValueError, match="block size"):
        tensor_bytes(int(QT.Q4_K), (255, 1))
    assert tensor_bytes(12345, (1, 2)) is None
    assert type_name(12345) == "type_12345"


def test_tensor_bytes_is_exact_block_arithmetic() -> None:
    for name, ggml, shape in RICH_TENSORS:
        block, size = gguf.GGML_QUANT_SIZES[ggml]
        ne = tuple(reversed(shape))
        assert tensor_bytes(int(ggml), ne) == math.prod(ne) // block * size, name
