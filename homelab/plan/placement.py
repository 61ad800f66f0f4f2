"""Routed experts in system RAM: which tensors llama.cpp's ``--n-cpu-moe`` moves, and what
its loader then holds on each side.

What llama.cpp does (``common/common.h``, ``src/llama-model-loader.cpp``,
``src/llama-model.cpp``): ``--n-cpu-moe N`` moves the routed experts of every block ``i < N``
to the CPU buffer type (:mod:`homelab.plan.tensor_kinds` says which tensors those are);
``--cpu-moe`` moves every block's. A block that does not exist matches nothing, so an N
above the block count moves every block's experts. Shared experts (``_shexp``), the router
(``ffn_gate_inp``) and attention stay with their layer, and so does the KV cache.

With the file mapped (llama-server's default), the CPU's tensors of one file become one
``CPU_Mapped`` buffer over the file from the first of their bytes to the last
(``get_mapping_range``): that is the figure the load log prints, larger than the tensors
themselves when the card's tensors lie between them. The device's model buffer holds the
rest, as today. Both are summed per group of tensors
(:func:`~homelab.plan.weight_groups.held_in_ram`), never per tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import sub
from typing import TYPE_CHECKING

from homelab.errors import UsageError
from homelab.plan.tensor_kinds import (
    EXPERTS_PATTERN,
    TensorSlot,
    expert_block,
    is_routed_expert,
    tensor_slots,
)
from homelab.plan.weight_groups import held_in_ram, mapped_span

if TYPE_CHECKING:
    from homelab.plan.budget import WeightPlacement
    from homelab.plan.planner import Plan

__all__ = [
    "EVERY_BLOCK",
    "EXPERTS_PATTERN",
    "RamShare",
    "TensorSlot",
    "clamp_note",
    "expert_block",
    "in_ram",
    "is_routed_expert",
    "keep_experts",
    "plan_ram",
    "ram_share",
    "tensor_slots",
    "with_experts_in_ram",
]

EVERY_BLOCK = 1 << 30
"""``--cpu-moe``: the experts of every block, however many the model has."""


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
    moved = tuple(map(sub, weights.per_block[:n], weights.experts_per_block[:n]))
    return replace(weights, per_block=moved + weights.per_block[n:], n_cpu_moe=n)


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
    the input embedding, one by one (the planner sums them per group: :func:`ram_share`)."""
    if weights.layout is None:
        return ()
    n = weights.n_cpu_moe
    return tuple(
        slot
        for slot in tensor_slots(weights.layout.model)
        if slot.embedding
        or (
            slot.block is not None
            and (slot.block < first_gpu_block or (slot.expert and slot.block < n))
        )
    )


def ram_share(weights: WeightPlacement, first_gpu_block: int) -> RamShare:
    """What stays in RAM (as :func:`in_ram` lists it), the mapped span as if nothing were
    repacked."""
    held = (
        []
        if weights.layout is None
        else held_in_ram(weights.layout, first_gpu_block, weights.n_cpu_moe)
    )
    experts = sum(piece.n_bytes * piece.moved for piece in held)
    tensors = sum(piece.n_bytes * piece.members for piece in held)
    return RamShare(weights.n_cpu_moe, len(weights.per_block), experts, tensors, mapped_span(held))


def plan_ram(plan: Plan) -> RamShare | None:
    """The plan's weights in RAM when it keeps experts there; None otherwise (as today)."""
    if not plan.weights.n_cpu_moe or not plan.on_gpu:
        return None
    n_blocks = len(plan.weights.per_block)
    first = 0 if plan.n_gpu_layers is None else n_blocks - (plan.n_gpu_layers - 1)
    return ram_share(plan.weights, first)
