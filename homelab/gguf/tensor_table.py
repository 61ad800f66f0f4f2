"""The tensor-info table of one GGUF file, kept in columns: what makes a 40,000-tensor header
quick to read and to plan with.

A MoE header lists tens of thousands of tensors, but they come in a dozen shapes and, in
the repeating blocks, a dozen kinds: ``blk.0.ffn_up_exps.weight`` and
``blk.3332.ffn_up_exps.weight`` differ in their block and their offset only. So the table
keeps one row per tensor in three columns (its name, its shape's id and its data offset),
each distinct shape once (:class:`TensorShape`: dims, type, exact bytes), and, as the rows
come, the tensors of the blocks in groups (:class:`BlockGroup`: the name after ``blk.N``,
one shape, and each member's block and offset). A planner sums what it needs per group,
never per tensor; the tensors outside the blocks (the embedding, the output head, a few
norms) are listed on their own (``loose``).

:class:`TensorInfo` tuples are made only when someone reads the table as a sequence
(``header.tensors[i]``, ``for t in header.tensors``), once, and kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, overload


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
    their blocks and data offsets, in file order."""

    __slots__ = ("blocks", "offsets", "rest", "shape", "shape_id")

    def __init__(self, rest: str, shape_id: int, shape: TensorShape) -> None:
        self.rest = rest
        """What follows the block number, from its dot on: ``".ffn_up_exps.weight"``."""
        self.shape_id = shape_id
        self.shape = shape
        self.blocks: list[int] = []
        self.offsets: list[int] = []


def block_of(name: str) -> tuple[int, str] | None:
    """(block, the rest of the name from its dot on) for a name ``^blk\\.(\\d+)\\.``; None for
    a tensor outside the blocks (``str.isdecimal``: what ``\\d`` matches)."""
    dot = name.find(".", 4) if name.startswith("blk.") else -1
    if dot > 4 and name[4:dot].isdecimal():
        return int(name[4:dot]), name[dot:]
    return None


class Mark(NamedTuple):
    """How long a table's lists were (:meth:`TensorTable.mark`), to cut them back to."""

    rows: int
    shapes: int
    groups: tuple[int, ...]
    """Each group's members."""
    loose: int


class TensorTable(Sequence[TensorInfo]):
    """One file's tensor infos, in file order, kept in columns (see the module's docstring).

    Read it as a sequence of :class:`TensorInfo` (made on first use), or through its columns
    and groups, which the reader fills (:meth:`add` for one record) and nobody changes after.
    """

    __slots__ = (
        "_group_index",
        "_infos",
        "_shape_index",
        "_weights",
        "groups",
        "loose",
        "names",
        "offsets",
        "raw_shapes",
        "shape_ids",
        "shapes",
    )

    def __init__(self) -> None:
        self.names: list[str] = []
        self.shape_ids: list[int] = []
        self.offsets: list[int] = []
        self.shapes: list[TensorShape] = []
        self.groups: list[BlockGroup] = []
        """The block tensors, by (rest of the name, shape), in the order each group first appears."""
        self.loose: list[int] = []
        """The rows of the tensors outside the blocks, in file order."""
        self.raw_shapes: dict[bytes, int] = {}
        """A record's n_dims, dims and type as the file stores them -> its shape's id (the
        reader's bulk loop looks its records up by these bytes)."""
        self._shape_index: dict[TensorShape, int] = {}
        self._group_index: dict[tuple[str, int], BlockGroup] = {}
        self._infos: tuple[TensorInfo, ...] | None = None
        self._weights: tuple[int | None] | None = None

    @classmethod
    def from_infos(cls, infos: Iterable[TensorInfo]) -> TensorTable:
        """The table of these tensor infos (a header built by hand, a test's)."""
        table = cls()
        for info in infos:
            table.add(info)
        return table

    # -- filling it (the reader) ------------------------------------------------------

    def shape_id(self, shape: TensorShape) -> int:
        """The id of ``shape``, new or not."""
        found = self._shape_index.get(shape)
        if found is None:
            found = self._shape_index[shape] = len(self.shapes)
            self.shapes.append(shape)
        return found

    def group(self, rest: str, shape_id: int) -> BlockGroup:
        """The group of the block tensors ``blk.N<rest>`` of this shape, new or not."""
        key = (rest, shape_id)
        found = self._group_index.get(key)
        if found is None:
            found = self._group_index[key] = BlockGroup(rest, shape_id, self.shapes[shape_id])
            self.groups.append(found)
        return found

    def add(self, info: TensorInfo) -> None:
        """Append one tensor (the reader's careful path, or a table built by hand)."""
        name, dims, ggml_type, type_name, offset, n_bytes = info
        sid = self.shape_id(TensorShape(tuple(dims), ggml_type, type_name, n_bytes))
        self.append_row(name, sid, offset)

    def append_row(self, name: str, shape_id: int, offset: int) -> None:
        """Append the row of one tensor whose shape has its id already."""
        self.names.append(name)
        self.shape_ids.append(shape_id)
        self.offsets.append(offset)
        in_block = block_of(name)
        if in_block is None:
            self.loose.append(len(self.names) - 1)
        else:
            group = self.group(in_block[1], shape_id)
            group.blocks.append(in_block[0])
            group.offsets.append(offset)
        self.invalidate()

    def mark(self) -> Mark:
        """Where the table stands, to :meth:`rollback` to."""
        return Mark(
            len(self.names),
            len(self.shapes),
            tuple(len(g.blocks) for g in self.groups),
            len(self.loose),
        )

    def rollback(self, mark: Mark) -> None:
        """Cut the table back to ``mark``: rows, shapes, groups and their members added since."""
        for column in (self.names, self.shape_ids, self.offsets):
            del column[mark.rows :]
        for group in self.groups[len(mark.groups) :]:
            del self._group_index[group.rest, group.shape_id]
        del self.groups[len(mark.groups) :]
        for shape in self.shapes[mark.shapes :]:
            del self._shape_index[shape]
        del self.shapes[mark.shapes :]
        self.raw_shapes = {raw: sid for raw, sid in self.raw_shapes.items() if sid < mark.shapes}
        for group, members in zip(self.groups, mark.groups, strict=True):
            del group.blocks[members:], group.offsets[members:]
        del self.loose[mark.loose :]
        self.invalidate()

    def invalidate(self) -> None:
        """Forget what was made of the rows (after rows were added)."""
        self._infos = None
        self._weights = None

    # -- reading it -------------------------------------------------------------------

    def info(self, row: int) -> TensorInfo:
        """Row ``row`` as a ``TensorInfo``."""
        dims, ggml_type, type_name, n_bytes = self.shapes[self.shape_ids[row]]
        return TensorInfo(self.names[row], dims, ggml_type, type_name, self.offsets[row], n_bytes)

    def infos(self) -> tuple[TensorInfo, ...]:
        """Every row as a ``TensorInfo``, in file order (made once)."""
        if self._infos is None:
            shapes, new = self.shapes, tuple.__new__
            self._infos = tuple(
                new(TensorInfo, (name, *shapes[sid][:3], offset, shapes[sid][3]))
                for name, sid, offset in zip(self.names, self.shape_ids, self.offsets, strict=True)
            )
        return self._infos

    @property
    def weights_bytes(self) -> int | None:
        """Sum of the tensors' exact bytes; None when any tensor's type is unknown."""
        if self._weights is None:
            total: int | None = 0
            for sid, count in Counter(self.shape_ids).items():
                n_bytes = self.shapes[sid].n_bytes
                if n_bytes is None:
                    total = None
                    break
                total = (total or 0) + n_bytes * count
            self._weights = (total,)
        return self._weights[0]

    def has_unknown_sizes(self) -> bool:
        """Some tensor is of a type homelab cannot size (every shape is some row's)."""
        return any(shape.n_bytes is None for shape in self.shapes)

    def max_block(self) -> int:
        """The highest block any tensor names; -1 when none is in a block."""
        return max((max(group.blocks) for group in self.groups), default=-1)

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, index: int) -> TensorInfo: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TensorInfo, ...]: ...

    def __getitem__(self, index: int | slice) -> TensorInfo | tuple[TensorInfo, ...]:
        if isinstance(index, slice):
            return self.infos()[index]
        if self._infos is not None:
            return self._infos[index]
        return self.info(range(len(self.names))[index])

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.infos())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TensorTable):
            return self.infos() == other.infos()
        if isinstance(other, tuple):
            return self.infos() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.infos())

    def __repr__(self) -> str:
        return f"TensorTable({len(self.names)} tensors, {len(self.shapes)} shapes)"


def as_table(tensors: Sequence[TensorInfo]) -> TensorTable:
    """``tensors`` as a table: itself when it is one."""
    return tensors if isinstance(tensors, TensorTable) else TensorTable.from_infos(tensors)


__all__ = ["BlockGroup", "TensorInfo", "TensorShape", "TensorTable", "as_table", "block_of"]
