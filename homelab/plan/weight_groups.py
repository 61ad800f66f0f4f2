"""A model's weights grouped as its header groups them, with what every planner pass asks of
them summed once: 40,000 tensors answered per group, not per tensor.

Each block group of each file (:class:`~homelab.gguf.tensor_table.BlockGroup`: the tensors
``blk.N<rest>`` of one shape) becomes a :class:`WeightGroup` that says, once, what decides
its members' place (a routed expert ``--n-cpu-moe`` moves, a matrix llama.cpp multiplies by)
and their bytes, with its members sorted by block and the running first and last byte of
their data. So "the members below block B" (how many, the first byte of their data and
the last) is a bisection: what llama-server keeps in RAM for any ``-ngl`` and
``--n-cpu-moe`` (:func:`held_in_ram`) and the span its mapping covers (:func:`mapped_span`,
``get_mapping_range``: per file, the first byte of the CPU's tensors to the last) come from
a dozen groups. The tensors outside the blocks (the input embedding, the output head, a few
norms) are kept one by one, in file order (:class:`LooseTensor`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate, repeat
from operator import add
from typing import TYPE_CHECKING, NamedTuple

from homelab.gguf.tensor_info import BlockGroup, TensorInfo
from homelab.plan.tensor_kinds import expert_block, matmul_rows, multiplies

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel


@dataclass(frozen=True, slots=True)
class WeightGroup:
    """The tensors ``blk.N<rest>`` of one shape in one file, over the blocks that have one."""

    part: int
    """Which file of a split model."""
    rest: str
    """The name after the block number: ``".ffn_up_exps.weight"``."""
    dims: tuple[int, ...]
    ggml_type: int
    type_name: str
    n_bytes: int
    """Each member's exact bytes (0 for a type homelab cannot size: the plan refuses it)."""
    expert: bool
    """Routed experts: their block's ``--n-cpu-moe`` override moves them to the CPU."""
    matmul_rows: int | None
    """``ne[1]`` when llama.cpp multiplies by them (the CPU's repack needs it); None otherwise."""
    blocks: tuple[int, ...]
    """The members' blocks, in ascending order."""
    offsets: tuple[int, ...]
    """The members' data offsets, in the same order."""
    starts: tuple[int, ...] | None
    """``starts[m]``: the first byte of the data of members ``0..m``; None when the offsets
    ascend with the blocks (a file written block by block): then it is ``offsets[0]``."""
    ends: tuple[int, ...] | None
    """``ends[m]``: the end of the data of members ``0..m``, the last byte's offset + 1; None
    when the offsets ascend: then it is ``offsets[m] + n_bytes``."""

    def below(self, block: int) -> int:
        """How many members lie in blocks below ``block``."""
        return bisect_left(self.blocks, block)

    def span_of_first(self, count: int) -> tuple[int, int]:
        """(first byte, end) of the data of the first ``count`` members (``count`` > 0)."""
        if self.starts is None or self.ends is None:
            return self.offsets[0], self.offsets[count - 1] + self.n_bytes
        return self.starts[count - 1], self.ends[count - 1]


class LooseTensor(NamedTuple):
    """A tensor outside the blocks: the input embedding, the output head, a norm."""

    part: int
    info: TensorInfo
    expert: bool
    """A routed expert by llama.cpp's pattern, outside any block (no override moves it)."""
    embedding: bool
    """The input embedding (always in RAM)."""
    matmul_rows: int | None

    @property
    def n_bytes(self) -> int:
        return self.info.n_bytes or 0


def _group(part: int, group: BlockGroup) -> WeightGroup:
    dims, ggml_type, type_name, n_bytes = group.shape
    name = "blk.0" + group.rest  # what the patterns say of the rest holds for every block
    expert = expert_block(name) is not None
    blocks, offsets = group.blocks, group.offsets
    in_order = sorted(blocks)
    if (
        blocks != in_order
    ):  # filed out of block order (blocks written in two ways, or a file out of order)
        order = sorted(range(len(blocks)), key=blocks.__getitem__)
        blocks, offsets = in_order, list(map(offsets.__getitem__, order))
    size = n_bytes or 0
    ascending = offsets == sorted(offsets)
    return WeightGroup(
        part=part,
        rest=group.rest,
        dims=dims,
        ggml_type=ggml_type,
        type_name=type_name,
        n_bytes=size,
        expert=expert,
        matmul_rows=matmul_rows(multiplies(name), expert, dims),
        blocks=tuple(blocks),
        offsets=tuple(offsets),
        starts=None if ascending else tuple(accumulate(offsets, min)),
        ends=None if ascending else tuple(accumulate(map(add, offsets, repeat(size)), max)),
    )


@dataclass(frozen=True, slots=True)
class WeightLayout:
    """Every tensor of a model, by group (the blocks') or one by one (the rest)."""

    groups: tuple[WeightGroup, ...]
    loose: tuple[LooseTensor, ...]
    """In file order, part 1 first."""
    n_blocks: int
    """The highest block any tensor names, + 1."""
    n_tensors: int
    model: GgufModel
    """The model it was made of (what the per-tensor view, ``tensor_slots``, lists)."""

    @classmethod
    def of(cls, model: GgufModel) -> WeightLayout:
        """The layout of ``model``'s tensors: a pass over its groups, not its tensors."""
        groups: list[WeightGroup] = []
        loose: list[LooseTensor] = []
        n_tensors, top = 0, -1
        for part, header in enumerate(model.parts):
            table = header.table
            n_tensors += len(table)
            top = max(top, table.max_block())
            groups += (_group(part, group) for group in table.groups)
            for info in table.loose:
                expert = expert_block(info.name) is not None
                rows = matmul_rows(multiplies(info.name), expert, info.shape)
                embedding = info.name.startswith("token_embd.")
                loose.append(LooseTensor(part, info, expert, embedding, rows))
        return cls(tuple(groups), tuple(loose), top + 1, n_tensors, model)

    def has_routed_experts(self) -> bool:
        """Any tensor is one llama.cpp's ``--cpu-moe`` pattern moves (in a block or not)."""
        return any(g.expert for g in self.groups) or any(t.expert for t in self.loose)


class Held(NamedTuple):
    """The members of one group (or one loose tensor) llama-server keeps on the CPU."""

    part: int
    type_name: str
    matmul_rows: int | None
    n_bytes: int
    """Each member's."""
    members: int
    moved: int
    """Of them, routed experts held for ``--n-cpu-moe`` alone (their block runs on a device)."""
    start: int
    """The first byte of their data."""
    end: int
    """The end of their data (the last byte's offset + 1)."""


def held_in_ram(layout: WeightLayout, first_gpu_block: int, n_cpu_moe: int) -> list[Held]:
    """What llama-server keeps on the CPU when blocks below ``first_gpu_block`` run there and
    the first ``n_cpu_moe`` blocks' experts stay there too: those, and the input embedding."""
    out = [
        Held(
            t.part,
            t.info.type_name,
            t.matmul_rows,
            t.n_bytes,
            1,
            0,
            t.info.offset,
            t.info.offset + t.n_bytes,
        )
        for t in layout.loose
        if t.embedding
    ]
    experts_below = max(first_gpu_block, n_cpu_moe)
    for group in layout.groups:
        count = group.below(experts_below if group.expert else first_gpu_block)
        if count:
            moved = count - group.below(first_gpu_block) if group.expert else 0
            start, end = group.span_of_first(count)
            out.append(
                Held(
                    group.part,
                    group.type_name,
                    group.matmul_rows,
                    group.n_bytes,
                    count,
                    moved,
                    start,
                    end,
                )
            )
    return out


def mapped_span(held: Iterable[Held]) -> int:
    """The ``CPU_Mapped`` buffers over these tensors: per file, first byte to last
    (``get_mapping_range``)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for piece in held:
        part = piece.part
        first[part] = min(first.get(part, piece.start), piece.start)
        last[part] = max(last.get(part, piece.end), piece.end)
    return sum(last[part] - first[part] for part in first)
