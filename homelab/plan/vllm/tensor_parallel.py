"""vLLM over several cards: ``--tensor-parallel-size``, priced per card before the boot.

Tensor parallelism gives every card the same slice: 1/N of each weight matrix (the
embedding and the LM head are vocabulary-sharded too) and 1/N of the KV heads (an MLA
latent cache is replicated on every card, as vLLM does; a model with fewer KV heads
than cards replicates heads, one per card). ``--gpu-memory-utilization`` is one fraction
for every card and each worker checks it against its own card at start-up, so the plan
takes the fraction the tightest card allows. Because the slices are equal, the smallest
card would cap every card: unequal cards are refused, with the reason (llama.cpp's layer
split gives each card what it holds). vLLM also needs the attention heads to divide
evenly over the cards.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from homelab.errors import UsageError
from homelab.gpu.report import GpuReport
from homelab.plan.budget import device_budget, pick_device
from homelab.plan.vllm.config import ModelConfig
from homelab.plan.vllm.pricing import Utilization, utilization_for
from homelab.units import format_bytes


@dataclass(frozen=True, slots=True)
class CardSlice:
    """What one card of a tensor-parallel plan holds: the model as one worker sees it."""

    size: int
    """``--tensor-parallel-size``."""
    cards: tuple[str, ...]
    weights_per_card: int
    kv_heads_per_card: int
    utilization: Utilization
    """The tightest card's (its fraction is the one every card gets)."""


def tensor_parallel(
    model: ModelConfig, report: GpuReport, indices: tuple[int, ...]
) -> tuple[ModelConfig, CardSlice]:
    """The per-card model (weights and KV heads divided) and the slice it came from.

    Raises:
        UsageError: the cards differ, or the heads do not divide over them.
    """
    devices = [pick_device(report, i) for i in indices]
    cards = [d for d in devices if d is not None]
    n = len(cards)
    kinds = {(d.name, d.total) for d in cards}
    if len(kinds) > 1:
        shown = ", ".join(f"GPU {d.index} {d.name} ({format_bytes(d.total)})" for d in cards)
        raise UsageError(
            f"vLLM's tensor parallelism puts an equal slice of the model on every card, so on "
            f"unequal cards ({shown}) the smallest caps them all; homelab does not plan it",
            hint="Pick equal cards, one card, or the llama.cpp engine, whose layer split gives "
            "each card what it can hold.",
        )
    if model.num_attention_heads % n:
        raise UsageError(
            f"{model.name} has {model.num_attention_heads} attention heads, which do not divide "
            f"over {n} cards; vLLM refuses a tensor-parallel size that does not divide them",
            hint="Pick a number of cards that divides the attention heads.",
        )
    utilizations = [utilization_for(d, device_budget(report, d.index)) for d in cards]
    tightest = min(utilizations, key=lambda u: u.fraction)
    kv_heads = model.num_kv_heads if model.mla is not None else max(1, model.num_kv_heads // n)
    weights = -(-model.weights.total // n)
    per_card = replace(model, weights=replace(model.weights, total=weights), num_kv_heads=kv_heads)
    names = tuple(device_budget(report, d.index).name for d in cards)
    return per_card, CardSlice(n, names, weights, kv_heads, tightest)
