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
from typing import TYPE_CHECKING

from homelab.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from homelab.gguf.header import GgufModel
    from homelab.plan.budget import WeightPlacement
    from homelab.plan.planner import Plan

EXPERTS_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""llama.cpp's ``LLM_FFN_EXPS_REGEX``: the routed experts ``--n-cpu-moe`` keeps in RAM."""
_EXPERTS = re.compile(EXPERTS_PATTERN)
_BLOCK_EXPERTS = re.compile(r"blk\.(\d+)" + EXPERTS_PATTERN)
r"""``--n-cpu-moe``'s per-block pattern, ``blk\.N`` + the experts' (searched, as llama.cpp does)."""
_BLOCK = re.compile(r"^blk\.(\d+)\.")

EVERY_BLOCK = 1 << 30
"""``--cpu-moe``: the experts of every block, however many the model has."""


def is_routed_expert(name: str) -> bool:
    """The tensor is one llama.cpp's ``--cpu-moe`` pattern moves to the CPU."""
    return _EXPERTS.search(name) is not None


def expert_block(name: str) -> int | None:
    """The block whose ``--n-cpu-moe`` override moves this tensor; None: no override does."""
    match = _BLOCK_EXPERTS.search(name)
    return int(match.group(1)) if match else None


@dataclass(frozen=True, slots=True)
class TensorSlot:
    """Where one tensor's bytes lie, and what decides its place."""

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
    """Every tensor's place in the files, in file order."""
    slots = []
    for part, header in enumerate(model.parts):
        for t in header.tensors:
            match = _BLOCK.match(t.name)
            block = int(match.group(1)) if match else None
            expert = expert_block(t.name) is not None
            slots.append(
                TensorSlot(
                    part,
                    t.offset,
                    t.n_bytes or 0,
                    block,
                    expert,
                    t.name.startswith("token_embd."),
                    t.type_name,
                    _matmul_rows(t.name, t.shape, expert=expert),
                )
            )
    return tuple(slots)


def _matmul_rows(name: str, shape: tuple[int, ...], *, expert: bool) -> int | None:
    """``ne[1]`` when llama.cpp uses the tensor as a matrix to multiply by: a ``.weight`` of
    2 dimensions (``MUL_MAT``) or a routed expert's of 3 (``MUL_MAT_ID``), but not a lookup
    table (``token_embd``, ``position_embd``, ``per_layer_token_embd``: ``GET_ROWS``)."""
    if not name.endswith(".weight") or "_embd." in name:
        return None
    if len(shape) == (3 if expert else 2):
        return shape[1]
    return None


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


def in_ram(weights: WeightPlacement, first_gpu_block: int) -> Iterator[TensorSlot]:
    """The tensors llama-server keeps on the CPU when blocks below ``first_gpu_block`` run
    there and the first ``weights.n_cpu_moe`` blocks' experts stay there too: those, and
    the input embedding."""
    n = weights.n_cpu_moe
    for slot in weights.slots:
        on_cpu_block = slot.block is not None and slot.block < first_gpu_block
        moved = slot.expert and slot.block is not None and slot.block < n
        if slot.embedding or on_cpu_block or moved:
            yield slot


def ram_share(weights: WeightPlacement, first_gpu_block: int) -> RamShare:
    """What stays in RAM (:func:`in_ram`), the mapped span as if nothing were repacked."""
    slots = tuple(in_ram(weights, first_gpu_block))
    experts = sum(
        s.n_bytes for s in slots if s.expert and s.block is not None and s.block >= first_gpu_block
    )
    tensors = sum(s.n_bytes for s in slots)
    return RamShare(weights.n_cpu_moe, len(weights.per_block), experts, tensors, mapped_span(slots))


def mapped_span(slots: Iterable[TensorSlot]) -> int:
    """The ``CPU_Mapped`` buffers over these tensors: per file, first byte to last
    (``get_mapping_range``)."""
    spans: dict[int, tuple[int, int]] = {}
    for slot in slots:
        lo, hi = spans.get(slot.part, (slot.offset, slot.offset + slot.n_bytes))
        spans[slot.part] = (min(lo, slot.offset), max(hi, slot.offset + slot.n_bytes))
    return sum(hi - lo for lo, hi in spans.values())


def plan_ram(plan: Plan) -> RamShare | None:
    """The plan's weights in RAM when it keeps experts there; None otherwise (as today)."""
    if not plan.weights.n_cpu_moe or not plan.on_gpu:
        return None
    n_blocks = len(plan.weights.per_block)
    first = 0 if plan.n_gpu_layers is None else n_blocks - (plan.n_gpu_layers - 1)
    return ram_share(plan.weights, first)
