"""Routed experts in system RAM: which tensors llama.cpp's ``--n-cpu-moe`` moves, and what
its loader then holds on each side.

What llama.cpp does (``common/common.h``, ``src/llama-model-loader.cpp``,
``src/llama-model.cpp``): ``--n-cpu-moe N`` adds one buffer-type override per block
``i < N``, the pattern ``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps`` to the CPU buffer
type; ``--cpu-moe`` is the same pattern without the block. The loader matches each tensor's
name with ``regex_search`` (so ``blk.1.`` never takes ``blk.11.``, and the biases of the
routed experts move with them); a block that does not exist matches nothing, so an N above
the block count moves every block's experts. Shared experts (``_shexp``), the router
(``ffn_gate_inp``) and attention stay with their layer, and so does the KV cache.

With the file mapped (llama-server's default), the CPU's tensors of one file become one
``CPU_Mapped`` buffer over the file from the first of their bytes to the last
(``get_mapping_range``): that is the figure the load log prints, larger than the tensors
themselves when the card's tensors lie between them. The device's model buffer holds the
rest, as today.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from operator import add, itemgetter
from typing import TYPE_CHECKING, NamedTuple

from homelab.errors import UsageError
from homelab.gc_pause import collector_paused

if TYPE_CHECKING:
    from collections.abc import Iterable

    from homelab.gguf.header import GgufModel
    from homelab.plan.budget import WeightPlacement
    from homelab.plan.planner import Plan

EXPERTS_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""llama.cpp's ``LLM_FFN_EXPS_REGEX``: the routed experts ``--n-cpu-moe`` keeps in RAM."""
_EXPERTS = re.compile(EXPERTS_PATTERN)
_BLOCK_EXPERTS = re.compile(r"blk\.(\d+)" + EXPERTS_PATTERN)
r"""``--n-cpu-moe``'s per-block pattern, ``blk\.N`` + the experts' (searched, as llama.cpp does)."""

EVERY_BLOCK = 1 << 30
"""``--cpu-moe``: the experts of every block, however many the model has."""


def is_routed_expert(name: str) -> bool:
    """The tensor is one llama.cpp's ``--cpu-moe`` pattern moves to the CPU."""
    return _EXPERTS.search(name) is not None


def expert_block(name: str) -> int | None:
    """The block whose ``--n-cpu-moe`` override moves this tensor; None: no override does."""
    match = _BLOCK_EXPERTS.search(name)
    return int(match.group(1)) if match else None


class TensorSlot(NamedTuple):
    """Where one tensor's bytes lie, and what decides its place.

    A named tuple, not a dataclass: a MoE model has 40,000 of these, made in every plan."""

    part: int
    """Which file of a split model."""
    offset: int
    n_bytes: int
    block: int | None
    """Its block ``blk.N``; None outside the blocks."""
    expert: bool
    """A routed expert of its block (moved by that block's ``--n-cpu-moe`` override)."""
    embedding: bool
    """The input embedding (always in RAM)."""
    type_name: str = ""
    """Its ggml type (``Q4_K``, ``F32``, ...)."""
    matmul_rows: int | None = None
    """``ne[1]`` of a weight llama.cpp multiplies by (``MUL_MAT`` when 2-D, ``MUL_MAT_ID``
    when a 3-D routed expert): the CPU backend's repack needs it; None for any other tensor."""


def tensor_slots(model: GgufModel) -> tuple[TensorSlot, ...]:
    """Every tensor's place in the files, in file order.

    A block's tensor ``blk.N<rest>`` is an expert, or a matrix to multiply by, for what
    ``<rest>`` says alone (the patterns cannot match across the block number), so each
    ``<rest>`` is judged once and the other blocks' tensors reuse it: a 40,000-tensor MoE
    has a dozen."""
    kinds: dict[str, tuple[bool, bool]] = {}  # <rest> -> (a routed expert, _multiplies)
    slots: list[TensorSlot] = []
    append, new = slots.append, tuple.__new__
    with collector_paused():  # 40k slots, none of them in a cycle
        for part, header in enumerate(model.parts):
            for name, shape, _, type_name, offset, n_bytes in header.tensors:
                dot = name.find(".", 4) if name.startswith("blk.") else -1
                if dot > 4 and name[4:dot].isdecimal():  # what ^blk\.(\d+)\. matches
                    block: int | None = int(name[4:dot])
                    kind = kinds.get(rest := name[dot:])
                    if kind is None:
                        kind = kinds[rest] = (expert_block(name) is not None, _multiplies(name))
                    expert, matmul = kind
                    embedding = False
                else:
                    block, expert = None, expert_block(name) is not None
                    matmul, embedding = _multiplies(name), name.startswith("token_embd.")
                rows = shape[1] if matmul and len(shape) == (3 if expert else 2) else None
                append(
                    new(
                        TensorSlot,
                        (part, offset, n_bytes or 0, block, expert, embedding, type_name, rows),
                    )
                )
    return tuple(slots)


def _multiplies(name: str) -> bool:
    """llama.cpp uses the tensor as a matrix to multiply by when it is a ``.weight`` of 2
    dimensions (``MUL_MAT``) or a routed expert's of 3 (``MUL_MAT_ID``), but not a lookup
    table (``token_embd``, ``position_embd``, ``per_layer_token_embd``: ``GET_ROWS``); this
    is the part the name decides (``ne[1]`` of such a weight is its ``matmul_rows``)."""
    return name.endswith(".weight") and "_embd." not in name


@dataclass(frozen=True, slots=True)
class RamShare:
    """The weights llama-server keeps in system RAM, in bytes."""

    n_cpu_moe: int
    """Blocks whose routed experts stay in RAM (``--n-cpu-moe``)."""
    n_blocks: int
    experts: int
    """Those experts' bytes."""
    tensors: int
    """Every tensor in RAM: the input embedding, those experts, blocks left on the CPU."""
    mapped: int
    """The ``CPU_Mapped`` buffer(s) the load log prints: per file, from the first byte of
    those tensors to the last."""


def with_experts_in_ram(weights: WeightPlacement, n_cpu_moe: int) -> WeightPlacement:
    """``weights`` with the routed experts of the first ``n_cpu_moe`` blocks off the device
    (clamped to the block count, as llama.cpp's overrides are).

    Raises:
        UsageError: the model has no routed experts, or ``n_cpu_moe`` is negative.
    """
    if n_cpu_moe < 0:
        raise UsageError(
            f"The experts-in-RAM setting is a block count, 0 or more, not {n_cpu_moe}."
        )
    if not any(weights.experts_per_block):
        raise UsageError(
            "this model has no routed experts (no blk.N.ffn_*_exps tensors): there is nothing "
            "to keep in system RAM",
            hint="Drop --n-cpu-moe / --cpu-moe; for a dense model the plan offloads whole layers.",
        )
    n = min(n_cpu_moe, len(weights.per_block))
    per_block = tuple(
        size - (weights.experts_per_block[i] if i < n else 0)
        for i, size in enumerate(weights.per_block)
    )
    return replace(weights, per_block=per_block, n_cpu_moe=n)


def keep_experts(
    weights: WeightPlacement, asked: int | None, *, on_card: bool
) -> tuple[WeightPlacement, list[str]]:
    """The weights with the routed experts of the first ``asked`` blocks off the device(s),
    and what to say about it. A plan for system RAM (not ``on_card``) has them there
    already: nothing moves.

    Raises:
        UsageError: see :func:`with_experts_in_ram`.
    """
    if not asked:
        return weights, []
    moved = with_experts_in_ram(weights, asked)
    if not on_card:
        return weights, ["The plan is for system RAM: the experts are there with everything else."]
    note = clamp_note(asked, weights)
    return moved, [note] if note else []


def clamp_note(asked: int, weights: WeightPlacement) -> str | None:
    """What to say when more blocks were asked than the model has (``--cpu-moe`` says nothing)."""
    n_blocks = len(weights.per_block)
    if asked <= n_blocks or asked == EVERY_BLOCK:
        return None
    return (
        f"The experts of {asked} blocks were asked to stay in system RAM; the model has "
        f"{n_blocks}, so the experts of every block do (as llama.cpp does with --n-cpu-moe {asked})."
    )


def in_ram(weights: WeightPlacement, first_gpu_block: int) -> tuple[TensorSlot, ...]:
    """The tensors llama-server keeps on the CPU when blocks below ``first_gpu_block`` run
    there and the first ``weights.n_cpu_moe`` blocks' experts stay there too: those, and
    the input embedding."""
    n = weights.n_cpu_moe
    return tuple(
        slot
        for slot in weights.slots
        if slot.embedding
        or (
            slot.block is not None
            and (slot.block < first_gpu_block or (slot.expert and slot.block < n))
        )
    )


def ram_share(weights: WeightPlacement, first_gpu_block: int) -> RamShare:
    """What stays in RAM (:func:`in_ram`), the mapped span as if nothing were repacked."""
    slots = in_ram(weights, first_gpu_block)
    experts = sum(
        s.n_bytes for s in slots if s.expert and s.block is not None and s.block >= first_gpu_block
    )
    tensors = sum(map(_N_BYTES, slots))
    return RamShare(weights.n_cpu_moe, len(weights.per_block), experts, tensors, mapped_span(slots))


_PART, _OFFSET, _N_BYTES = itemgetter(0), itemgetter(1), itemgetter(2)
"""A ``TensorSlot``'s file, offset and bytes, for ``map`` over thousands of them."""


def mapped_span(slots: Iterable[TensorSlot]) -> int:
    """The ``CPU_Mapped`` buffers over these tensors: per file, first byte to last
    (``get_mapping_range``)."""
    slots = tuple(slots)
    parts = set(map(_PART, slots))
    span = 0
    for part in parts:
        mine = slots if len(parts) == 1 else tuple(s for s in slots if s.part == part)
        ends = map(add, map(_OFFSET, mine), map(_N_BYTES, mine))
        span += max(ends) - min(map(_OFFSET, mine))
    return span


def plan_ram(plan: Plan) -> RamShare | None:
    """The plan's weights in RAM when it keeps experts there; None otherwise (as today)."""
    if not plan.weights.n_cpu_moe or not plan.on_gpu:
        return None
    n_blocks = len(plan.weights.per_block)
    first = 0 if plan.n_gpu_layers is None else n_blocks - (plan.n_gpu_layers - 1)
    return ram_share(plan.weights, first)
