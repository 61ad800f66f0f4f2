"""ggml tensor types: id, name, block size and bytes per block.

The table is generated from the ``gguf`` package (``gguf.GGMLQuantizationType`` and
``gguf.GGML_QUANT_SIZES``) into :mod:`homelab.gguf.ggml_table` by
``tools/gen_ggml_table.py``, so it follows llama.cpp as the package is upgraded while
homelab never imports ``gguf`` (and numpy with it) at run time. A
quantized type stores ``block_size`` values in ``type_size`` bytes (``Q8_0``: 32 values
in 34 bytes), so a row of ``n`` values takes ``n // block_size * type_size`` bytes and
``n`` must be a multiple of the block size.

Everything here is plain arithmetic over numbers; the functions raise ``ValueError``
for numbers that cannot be right, and the caller that knows where a number came from
(a model file, a command line) turns that into the error a person sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from homelab.gguf.ggml_table import GGML_TYPE_ROWS


@dataclass(frozen=True, slots=True)
class GgmlType:
    """One ggml tensor type."""

    type_id: int
    """The ``ggml_type`` enum value stored in GGUF tensor infos."""
    name: str
    """Upper-case name as llama.cpp prints it, e.g. ``"Q4_K"``."""
    block_size: int
    """Values per block (1 for plain types such as F16)."""
    type_size: int
    """Bytes per block."""


GGML_TYPES: dict[int, GgmlType] = {row[0]: GgmlType(*row) for row in GGML_TYPE_ROWS}
"""Every ggml type the ``gguf`` package the table was generated from knows, by id."""

_BY_NAME: dict[str, GgmlType] = {t.name.lower(): t for t in GGML_TYPES.values()}


def type_name(type_id: int) -> str:
    """The type's name, or ``"type_<n>"`` for an id the table does not know."""
    known = GGML_TYPES.get(type_id)
    return known.name if known is not None else f"type_{type_id}"


def ggml_type(name_or_id: str | int) -> GgmlType:
    """Look a type up by id (``8``) or by any-case name (``"q8_0"``, ``"Q8_0"``, ``"iq4_nl"``).

    Raises:
        ValueError: no such type; a name usually comes from a person (a cache type on
            the command line), so the message lists the names that exist.
    """
    if isinstance(name_or_id, int):
        found = GGML_TYPES.get(name_or_id)
        if found is None:
            raise ValueError(f"unknown ggml type id {name_or_id}")
        return found
    found = _BY_NAME.get(name_or_id.strip().lower())
    if found is None:
        known = ", ".join(sorted(_BY_NAME))
        raise ValueError(f"unknown ggml type {name_or_id!r}; known types: {known}")
    return found


def row_bytes(name_or_id: str | int, n: int) -> int:
    """Bytes of ``n`` consecutive values of one type (llama.cpp's ``ggml_row_size``).

    ``row_bytes("q8_0", 4096) == 4352``; ``row_bytes("f16", 4096) == 8192``.

    Raises:
        ValueError: unknown type, negative ``n``, or ``n`` not a multiple of the type's
            block size (a quantized row must hold whole blocks).
    """
    kind = ggml_type(name_or_id)
    if n < 0:
        raise ValueError(f"negative value count {n}")
    if n % kind.block_size:
        raise ValueError(
            f"{kind.name} stores values in blocks of {kind.block_size}; {n} is not a multiple of it"
        )
    return n // kind.block_size * kind.type_size


def tensor_bytes(ggml_type_id: int, shape: tuple[int, ...] | list[int]) -> int | None:
    """Exact data bytes of a tensor of ``shape`` (``ne0`` first) and ggml type ``ggml_type_id``.

    Returns ``None`` for a type id the table does not know (a newer file):
    the size is then unknown, never guessed.

    Raises:
        ValueError: a negative dimension, or ``ne0`` not a multiple of the block size
            (ggml cannot lay such a tensor out, so the file is broken).
    """
    kind = GGML_TYPES.get(ggml_type_id)
    if kind is None:
        return None
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {tuple(shape)}")
    ne0 = shape[0] if shape else 1
    if ne0 % kind.block_size:
        raise ValueError(
            f"first dimension {ne0} is not a multiple of {kind.name}'s block size {kind.block_size}"
        )
    return prod(shape) // kind.block_size * kind.type_size
