"""One tensor-info record of a GGUF header, and what the table files records under: their
shape (:class:`TensorShape`), their block group (:class:`BlockGroup`: ``blk.N<rest>`` of one
shape), and a block's sequence of records (:class:`BlockTemplate`).

A MoE header lists tens of thousands of tensors, but they come in a dozen shapes and, in the
repeating blocks, a dozen kinds: ``blk.0.ffn_up_exps.weight`` and
``blk.3332.ffn_up_exps.weight`` differ in their block and their offset only. Most blocks
are even written alike, record for record; the reader matches such a block whole
against one it read before (:mod:`homelab.gguf.tensor_records`).
"""

from __future__ import annotations

from typing import NamedTuple


class TensorInfo(NamedTuple):
    """One tensor's entry in the header.

    A named tuple, not a dataclass: a MoE header holds 40,000 of these, and a tuple is made
    several times faster (``TensorInfo._replace`` changes a field)."""

    name: str
    shape: tuple[int, ...]
    """Dimensions as GGUF stores them (ne0 first)."""
    ggml_type: int
    """The ``ggml_type`` enum value (``gguf.GGMLQuantizationType``)."""
    type_name: str
    """The type's name, e.g. ``"Q4_K"``; ``"type_<n>"`` for a value we do not know."""
    offset: int
    """Offset of the data, relative to the start of the data section."""
    n_bytes: int | None
    """Exact bytes of the data (block size arithmetic); ``None`` for an unknown type."""


class TensorShape(NamedTuple):
    """What tensors of one shape and type share: everything of a ``TensorInfo`` but the name
    and the offset."""

    dims: tuple[int, ...]
    ggml_type: int
    type_name: str
    n_bytes: int | None


class BlockGroup:
    """The tensors ``blk.N<rest>`` of one ``rest`` and one shape, over the blocks that have one:
    their blocks and data offsets (in the order the table filed them)."""

    __slots__ = ("blocks", "offsets", "rest", "shape", "shape_id")

    def __init__(self, rest: str, shape_id: int, shape: TensorShape) -> None:
        self.rest = rest
        """What follows the block number, from its dot on: ``".ffn_up_exps.weight"``."""
        self.shape_id = shape_id
        self.shape = shape
        self.blocks: list[int] = []
        self.offsets: list[int] = []


class BlockTemplate:
    """The records of one block as the file wrote them, but for the block number and the
    offsets: each record's rest of the name, shape and group. A block written alike is
    filed whole (:meth:`~homelab.gguf.tensor_table.TensorTable.add_block`)."""

    __slots__ = ("groups", "rests", "shape_ids", "tails")

    def __init__(self, tails: tuple[bytes, ...], groups: tuple[BlockGroup, ...]) -> None:
        self.tails = tails
        """Each record's bytes from its name's dot to the end of its type, as the file has them."""
        self.groups = groups
        self.rests = tuple(group.rest for group in groups)
        self.shape_ids = tuple(group.shape_id for group in groups)


def block_of(name: str) -> tuple[int, str] | None:
    """(block, the rest of the name from its dot on) for a name ``^blk\\.(\\d+)\\.``; None for
    a tensor outside the blocks (``str.isdecimal``: what ``\\d`` matches)."""
    dot = name.find(".", 4) if name.startswith("blk.") else -1
    if dot > 4 and name[4:dot].isdecimal():
        return int(name[4:dot]), name[dot:]
    return None
