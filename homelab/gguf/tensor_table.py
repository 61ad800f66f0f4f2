"""The tensor-info table of one GGUF file, kept as its block groups and runs of rows: what
makes a 40,000-tensor header quick to read and to plan with.

The table files each tensor under its shape (:class:`~homelab.gguf.tensor_info.TensorShape`,
kept once) and, in the repeating blocks, under its group
(:class:`~homelab.gguf.tensor_info.BlockGroup`: the name after ``blk.N``, one shape, each
member's block and offset); the tensors outside the blocks (the embedding, the output
head, a few norms) are listed as they are (``loose``). A planner sums per group, never per
tensor. In file order the table keeps runs: rows read one by one (name, shape, offset),
and whole blocks written alike (a :class:`~homelab.gguf.tensor_info.BlockTemplate`, the
block's number and its offsets), whose names are spelled only when asked for.

:class:`~homelab.gguf.tensor_info.TensorInfo` tuples are made only when someone reads the
table as a sequence (``header.tensors[i]``, ``for t in header.tensors``), once, and kept.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, chain
from operator import itemgetter
from typing import NamedTuple, overload

from homelab.gguf.tensor_info import (
    BlockGroup,
    BlockTemplate,
    TensorInfo,
    TensorShape,
    block_of,
)


class _Rows:
    """Rows read one by one, in file order."""

    __slots__ = ("names", "offsets", "shape_ids")

    def __init__(self) -> None:
        self.names: list[str] = []
        self.shape_ids: list[int] = []
        self.offsets: list[int] = []

    def __len__(self) -> int:
        return len(self.names)


class _Blocks:
    """Consecutive blocks written alike (one template), in file order."""

    __slots__ = ("digits", "offsets", "template")

    def __init__(self, template: BlockTemplate) -> None:
        self.template = template
        self.digits: list[bytes] = []
        """Each block's number as the names spell it (ASCII digits)."""
        self.offsets: list[tuple[int, ...]] = []
        """Each block's offsets, one a record of the template."""

    def __len__(self) -> int:
        return len(self.digits) * len(self.template.tails)


BlockEntry = tuple[BlockTemplate, bytes, tuple[int, ...]]
"""A block read whole: its template, its number's digits, its offsets."""


class Mark(NamedTuple):
    """How far a table was filled (:meth:`TensorTable.mark`), to cut it back to."""

    runs: int
    rows: int
    shapes: int
    groups: tuple[int, ...]
    """Each group's members."""
    loose: int


class TensorTable(Sequence[TensorInfo]):
    """One file's tensor infos, in file order (see the module's docstring).

    Read it as a sequence of :class:`TensorInfo` (made on first use), or through its groups
    and loose tensors; the reader fills it (:meth:`add` for one record, :meth:`add_rows` and
    :meth:`add_blocks` in bulk) and nobody changes it after.
    """

    __slots__ = (
        "_group_index",
        "_infos",
        "_names",
        "_pending",
        "_rows",
        "_runs",
        "_seen",
        "_seen_upto",
        "_shape_index",
        "groups",
        "loose",
        "raw_shapes",
        "shapes",
    )

    def __init__(self) -> None:
        self.shapes: list[TensorShape] = []
        """Every shape some tensor has (ids index it)."""
        self.groups: list[BlockGroup] = []
        """The block tensors, by (rest of the name, shape), in the order each group first appears."""
        self.loose: list[TensorInfo] = []
        """The tensors outside the blocks, in file order."""
        self.raw_shapes: dict[bytes, int] = {}
        """A record's n_dims, dims and type as the file stores them -> its shape's id (the
        reader's bulk loop looks its records up by these bytes)."""
        self._shape_index: dict[TensorShape, int] = {}
        self._group_index: dict[tuple[str, int], BlockGroup] = {}
        self._runs: list[_Rows | _Blocks] = []
        self._pending: dict[BlockTemplate, tuple[list[int], list[tuple[int, ...]]]] = {}
        """Blocks added whole and not yet filed in the groups, by template."""
        self._rows = 0
        self._infos: tuple[TensorInfo, ...] | None = None
        self._names: list[str] | None = None
        self._seen: set[str] | None = None
        self._seen_upto = (0, 0)
        """(run, rows of it) that ``_seen`` holds the names of."""

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
        """Append one tensor, filed under its group or among the loose (the reader's careful
        path, or a table built by hand)."""
        name, dims, ggml_type, type_name, offset, n_bytes = info
        sid = self.shape_id(TensorShape(tuple(dims), ggml_type, type_name, n_bytes))
        in_block = block_of(name)
        if in_block is None:
            self.loose.append(TensorInfo(name, tuple(dims), ggml_type, type_name, offset, n_bytes))
        else:
            group = self.group(in_block[1], sid)
            group.blocks.append(in_block[0])
            group.offsets.append(offset)
        self.add_rows([name], [sid], [offset])

    def add_rows(self, names: list[str], shape_ids: list[int], offsets: list[int]) -> None:
        """Append rows in file order; whoever adds them has filed them (groups, loose)."""
        tail = self._runs[-1] if self._runs else None
        if not isinstance(tail, _Rows):
            tail = _Rows()
            self._runs.append(tail)
        tail.names += names
        tail.shape_ids += shape_ids
        tail.offsets += offsets
        self._grew(len(names))

    def add_blocks(self, blocks: list[BlockEntry]) -> None:
        """Append blocks read whole, in file order; filed in the groups by :meth:`file_blocks`."""
        runs, pending = self._runs, self._pending
        rows = 0
        tail = runs[-1] if runs else None
        for template, digits, offsets in blocks:
            if not isinstance(tail, _Blocks) or tail.template is not template:
                tail = _Blocks(template)
                runs.append(tail)
            tail.digits.append(digits)
            tail.offsets.append(offsets)
            waiting = pending.get(template)
            if waiting is None:
                waiting = pending[template] = ([], [])
            waiting[0].append(int(digits))
            waiting[1].append(offsets)
            rows += len(offsets)
        self._grew(rows)

    def file_blocks(self) -> None:
        """File the blocks added whole since the last call under their groups (a few list
        extensions a template: their members are alike, record by record)."""
        for template, (blocks, offsets) in self._pending.items():
            for at, group in enumerate(template.groups):
                group.blocks += blocks
                group.offsets += map(itemgetter(at), offsets)
        self._pending.clear()

    def _grew(self, rows: int) -> None:
        self._rows += rows
        self._infos = self._names = None

    def mark(self) -> Mark:
        """Where the table stands, to :meth:`rollback` to (every block filed already)."""
        groups = tuple(len(g.blocks) for g in self.groups)
        return Mark(len(self._runs), self._rows, len(self.shapes), groups, len(self.loose))

    def rollback(self, mark: Mark) -> None:
        """Cut the table back to ``mark`` (taken when the last run was complete): the runs,
        shapes, groups and members added since."""
        del self._runs[mark.runs :]
        for group in self.groups[len(mark.groups) :]:
            del self._group_index[group.rest, group.shape_id]
        del self.groups[len(mark.groups) :]
        for group, members in zip(self.groups, mark.groups, strict=True):
            del group.blocks[members:], group.offsets[members:]
        for shape in self.shapes[mark.shapes :]:
            del self._shape_index[shape]
        del self.shapes[mark.shapes :]
        self.raw_shapes = {raw: sid for raw, sid in self.raw_shapes.items() if sid < mark.shapes}
        del self.loose[mark.loose :]
        self._pending.clear()
        self._rows = mark.rows
        self._infos = self._names = self._seen = None

    def seal(self) -> None:
        """End the last run: what is added next starts a run of its own (take the
        :meth:`mark` to cut back to first)."""
        self._runs.append(_Rows())

    # -- reading it -------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        """Every tensor's name, in file order (spelled out once, when first asked)."""
        if self._names is None:
            self._names = list(chain.from_iterable(map(_names_of, self._runs)))
        return self._names

    def has_name(self, name: str) -> bool:
        """A tensor of this name is in the table (the careful reader asks, record by record:
        the set of names is made when first asked and caught up with the rows since)."""
        if self._seen is None:
            self._seen, self._seen_upto = set(), (0, 0)
        at, done = self._seen_upto
        runs = self._runs
        while at < len(runs):
            names = _names_of(runs[at])
            self._seen.update(names[done:])
            if at == len(runs) - 1:  # the last run may grow: remember how far it went
                done = len(names)
                break
            at, done = at + 1, 0
        self._seen_upto = (at, done)
        return name in self._seen

    def infos(self) -> tuple[TensorInfo, ...]:
        """Every row as a ``TensorInfo``, in file order (made once)."""
        if self._infos is None:
            shapes, new = self.shapes, tuple.__new__
            self._infos = tuple(
                new(TensorInfo, (name, *shapes[sid][:3], offset, shapes[sid][3]))
                for name, sid, offset in zip(
                    self.names,
                    chain.from_iterable(map(_shape_ids_of, self._runs)),
                    chain.from_iterable(map(_offsets_of, self._runs)),
                    strict=True,
                )
            )
        return self._infos

    @property
    def weights_bytes(self) -> int | None:
        """Sum of the tensors' exact bytes; None when any tensor's type is unknown."""
        total = 0
        for n_bytes, count in chain(
            ((g.shape.n_bytes, len(g.blocks)) for g in self.groups),
            ((t.n_bytes, 1) for t in self.loose),
        ):
            if n_bytes is None:
                return None
            total += n_bytes * count
        return total

    def has_unknown_sizes(self) -> bool:
        """Some tensor is of a type homelab cannot size (every shape is some row's)."""
        return any(shape.n_bytes is None for shape in self.shapes)

    def max_block(self) -> int:
        """The highest block any tensor names; -1 when none is in a block."""
        return max((max(group.blocks) for group in self.groups if group.blocks), default=-1)

    def __len__(self) -> int:
        return self._rows

    @overload
    def __getitem__(self, index: int) -> TensorInfo: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TensorInfo, ...]: ...

    def __getitem__(self, index: int | slice) -> TensorInfo | tuple[TensorInfo, ...]:
        if isinstance(index, slice) or self._infos is not None:
            return self.infos()[index]
        row = range(self._rows)[index]
        starts = list(accumulate(map(len, self._runs), initial=0))
        at = bisect_right(starts, row) - 1
        run = self._runs[at]
        return TensorInfo._make(_run_infos(run, self.shapes)[row - starts[at]])

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
        return f"TensorTable({self._rows} tensors, {len(self.shapes)} shapes)"


def _names_of(run: _Rows | _Blocks) -> list[str]:
    if isinstance(run, _Rows):
        return run.names
    rests = run.template.rests
    return [f"blk.{digits.decode()}{rest}" for digits in run.digits for rest in rests]


def _shape_ids_of(run: _Rows | _Blocks) -> Iterable[int]:
    if isinstance(run, _Rows):
        return run.shape_ids
    return run.template.shape_ids * len(run.digits)


def _offsets_of(run: _Rows | _Blocks) -> Iterable[int]:
    return run.offsets if isinstance(run, _Rows) else chain.from_iterable(run.offsets)


def _run_infos(run: _Rows | _Blocks, shapes: list[TensorShape]) -> list[tuple[object, ...]]:
    """One run's rows as ``TensorInfo`` fields (for a single row asked by index)."""
    return [
        (name, *shapes[sid][:3], offset, shapes[sid][3])
        for name, sid, offset in zip(
            _names_of(run), _shape_ids_of(run), _offsets_of(run), strict=True
        )
    ]


def as_table(tensors: Sequence[TensorInfo]) -> TensorTable:
    """``tensors`` as a table: itself when it is one."""
    return tensors if isinstance(tensors, TensorTable) else TensorTable.from_infos(tensors)


__all__ = [
    "BlockGroup",
    "BlockEntry",
    "BlockTemplate",
    "TensorInfo",
    "TensorShape",
    "TensorTable",
    "as_table",
    "block_of",
]
