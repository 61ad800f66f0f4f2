"""What a tensor's name tells llama.cpp about its place: a routed expert that ``--n-cpu-moe``
moves, a matrix it multiplies by (whose ``ne[1]`` the CPU's repack needs), the input
embedding; and the per-tensor view of a model's weights (:class:`TensorSlot`).

What llama.cpp does (``common/common.h``, ``src/llama-model-loader.cpp``): ``--n-cpu-moe N``
adds one buffer-type override per block ``i < N``, the pattern
``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps`` to the CPU buffer type; ``--cpu-moe`` is
the same pattern without the block. The loader matches each tensor's name with
``regex_search`` (so ``blk.1.`` never takes ``blk.11.``, and the biases of the routed experts
move with them). Shared experts (``_shexp``), the router (``ffn_gate_inp``) and attention stay
with their layer.

A block's tensor ``blk.N<rest>`` is an expert, or a matrix to multiply by, for what ``<rest>``
says alone (the patterns cannot match across the block number): the planner judges each
group of a model's tensors once (:mod:`homelab.plan.weight_groups`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

from homelab.gc_pause import collector_paused
from homelab.gguf.tensor_info import block_of

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel

EXPERTS_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""llama.cpp's ``LLM_FFN_EXPS_REGEX``: the routed experts ``--n-cpu-moe`` keeps in RAM."""
_EXPERTS = re.compile(EXPERTS_PATTERN)
_BLOCK_EXPERTS = re.compile(r"blk\.(\d+)" + EXPERTS_PATTERN)
r"""``--n-cpu-moe``'s per-block pattern, ``blk\.N`` + the experts' (searched, as llama.cpp does)."""


def is_routed_expert(name: str) -> bool:
    """The tensor is one llama.cpp's ``--cpu-moe`` pattern moves to the CPU."""
    return _EXPERTS.search(name) is not None


def expert_block(name: str) -> int | None:
    """The block whose ``--n-cpu-moe`` override moves this tensor; None: no override does."""
    match = _BLOCK_EXPERTS.search(name)
    return int(match.group(1)) if match else None


def multiplies(name: str) -> bool:
    """llama.cpp uses the tensor as a matrix to multiply by when it is a ``.weight`` of 2
    dimensions (``MUL_MAT``) or a routed expert's of 3 (``MUL_MAT_ID``), but not a lookup
    table (``token_embd``, ``position_embd``, ``per_layer_token_embd``: ``GET_ROWS``); this
    is the part the name decides (``ne[1]`` of such a weight is its ``matmul_rows``)."""
    return name.endswith(".weight") and "_embd." not in name


def matmul_rows(matmul: bool, expert: bool, dims: tuple[int, ...]) -> int | None:
    """``ne[1]`` of a weight llama.cpp multiplies by (2-D, or 3-D for a routed expert); None
    for any other tensor."""
    return dims[1] if matmul and len(dims) == (3 if expert else 2) else None


class TensorSlot(NamedTuple):
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
    """Every tensor's place in the files, in file order, one by one (the planner itself sums
    per group: :class:`~homelab.plan.weight_groups.WeightLayout`)."""
    kinds: dict[str, tuple[bool, bool]] = {}  # the rest of a block's name -> (expert, matmul)
    slots: list[TensorSlot] = []
    with collector_paused():
        for part, header in enumerate(model.parts):
            for name, shape, _, type_name, offset, n_bytes in header.tensors:
                in_block = block_of(name)
                if in_block is None:
                    block, embedding = None, name.startswith("token_embd.")
                    expert, matmul = expert_block(name) is not None, multiplies(name)
                else:
                    block, embedding = in_block[0], False
                    kind = kinds.get(in_block[1])
                    if kind is None:
                        kind = kinds[in_block[1]] = (
                            expert_block(name) is not None,
                            multiplies(name),
                        )
                    expert, matmul = kind
                rows = matmul_rows(matmul, expert, shape)
                slots.append(
                    TensorSlot(
                        part, offset, n_bytes or 0, block, expert, embedding, type_name, rows
                    )
                )
    return tuple(slots)
