"""vLLM's memory budget, priced before booting.

vLLM takes ``--gpu-memory-utilization`` × the CUDA-visible total, and spends it in
a fixed order (vllm/v1/worker/gpu_worker.py): the weights, the activation peak of
one dummy forward pass of ``--max-num-batched-tokens`` tokens plus a sampler pass,
memory outside torch, the CUDA-graph estimate; what is left becomes the KV pool.
Its start-up check runs before any of that, inside its own CUDA context:
``free ≥ ceil(util × total)`` or it refuses to start.

So the fraction is derived from the NVML figures homelab measured, not assumed:
``util = (free_min − vLLM's CUDA context − runtime slack − headroom) / (total − reserved)``,
floored to 3 decimals. ``free_min`` is the lowest free memory over the sampling
window (the desktop at its worst); the headroom is the desktop margin of
:mod:`homelab.plan.budget` (1 GiB on a card that drives a display). The weights
are exact (the files' sizes); the context, the activation peak, memory outside
torch and the graphs are estimates until vLLM's own log measures them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from homelab.errors import DoesNotFitError
from homelab.gpu.report import GpuDevice
from homelab.plan.budget import DeviceBudget
from homelab.plan.vllm.config import ModelConfig
from homelab.units import MiB, format_bytes

CUDA_CONTEXT_BYTES = 640 * MiB
"""vLLM's CUDA context, cuBLAS handles and torch state, created before its free-memory
check (research engines.md A1.1: 0.4–0.7 GiB on consumer cards)."""
RUNTIME_SLACK_BYTES = 512 * MiB
"""Memory vLLM takes after profiling and outside its budget: the first request's sampler
and workspaces (~400 MiB seen on a 3090), graph capture beyond its estimate."""
NON_TORCH_BYTES = 256 * MiB
"""Allocations outside torch on one GPU (attention workspaces; 0.07–0.26 GiB in logs)."""
GRAPH_BASE_BYTES = 256 * MiB
GRAPH_PER_SIZE_BYTES = 5 * MiB
"""CUDA graphs: a pool plus a little per captured batch size (logs: 0.23–0.67 GiB for 51 sizes)."""
LOGITS_COPIES_NUM, LOGITS_COPIES_DEN = 3, 2
"""fp32 logits for each sampled row, and half again for the sampler's temporaries."""
ESTIMATE_MARGIN_BYTES = 256 * MiB
"""KV pool left unplanned when homelab picks a length itself: the activation peak, memory
outside torch and the graphs are estimates, and vLLM measures them before it sizes the pool."""
UNKNOWN_VOCAB = 256_000
MAX_CAPTURE_SIZE = 512


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """Batch sizes vLLM captures CUDA graphs for (vllm/config/vllm.py, no speculation)."""
    largest = min(max_num_seqs * 2, MAX_CAPTURE_SIZE, max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, MAX_CAPTURE_SIZE + 1, 16)]
    return [s for s in sizes if s <= largest]


def cuda_graph_bytes(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Estimated CUDA-graph memory (vLLM subtracts its own estimate from the KV budget)."""
    return GRAPH_BASE_BYTES + GRAPH_PER_SIZE_BYTES * len(
        capture_sizes(max_num_seqs, max_num_batched_tokens)
    )


@dataclass(frozen=True, slots=True)
class Activation:
    """The activation peak of vLLM's profiling pass, by part."""

    tokens: int
    """``--max-num-batched-tokens``: the dummy forward pass's width."""
    bytes_per_token: int
    """Widest layer's live tensors for one token: residual and norms plus the widest of
    the MLP (or routed experts) and the attention projections."""
    rows: int
    """Sampled rows: ``min(max_num_seqs, tokens)``."""
    vocab: int
    logits: int

    @property
    def forward(self) -> int:
        return self.tokens * self.bytes_per_token

    @property
    def total(self) -> int:
        return self.forward + self.logits


def activation_estimate(
    model: ModelConfig, max_num_batched_tokens: int, max_num_seqs: int
) -> Activation:
    """Activation scratch: linear in ``max_num_batched_tokens``, plus the sampler's logits."""
    hidden = model.hidden_size
    mlp = 3 * (model.intermediate_size or 4 * hidden)
    if model.moe is not None:
        routed = (
            model.moe.experts_per_token * model.moe.expert_intermediate
            + model.moe.shared_intermediate
        )
        mlp = max(mlp, 3 * routed + model.moe.experts_per_token * hidden)
    if model.mla is not None:
        attention = 3 * model.num_attention_heads * model.head_dim
    else:
        attention = (model.num_attention_heads + 2 * model.num_kv_heads) * model.head_dim
    if model.linear is not None:
        lin = model.linear
        attention = max(
            attention,
            2 * lin.num_key_heads * lin.key_head_dim + 2 * lin.num_value_heads * lin.value_head_dim,
        )
    per_token = model.dtype_bytes * (4 * hidden + max(mlp, attention))
    rows = min(max_num_seqs, max_num_batched_tokens)
    vocab = model.vocab_size or UNKNOWN_VOCAB
    logits = rows * vocab * 4 * LOGITS_COPIES_NUM // LOGITS_COPIES_DEN
    return Activation(max_num_batched_tokens, per_token, rows, vocab, logits)


@dataclass(frozen=True, slots=True)
class Utilization:
    """``--gpu-memory-utilization`` and the NVML figures it came from, in bytes."""

    device: str
    visible_total: int
    """CUDA-visible total: NVML total − reserved (what vLLM calls the total)."""
    reserved: int
    free_min: int
    desktop_peak: int | None
    headroom: int
    display_active: bool
    cuda_context: int
    runtime_slack: int
    fraction: float

    @property
    def requested(self) -> int:
        """What vLLM asks for: ``ceil(util × total)``."""
        return math.ceil(self.visible_total * self.fraction)

    @property
    def free_at_check(self) -> int:
        """Free memory when vLLM checks, in our worst case: after its context, minus the margins."""
        return self.free_min - self.cuda_context - self.runtime_slack - self.headroom


def utilization_for(device: GpuDevice, budget: DeviceBudget) -> Utilization:
    """The largest fraction vLLM's start-up check accepts with the desktop at its worst.

    Raises:
        DoesNotFitError: the card has nothing left once vLLM's context and the margins are taken.
    """
    visible = device.total - budget.reserved
    fit = device.free_min - CUDA_CONTEXT_BYTES - RUNTIME_SLACK_BYTES - budget.headroom
    fraction = math.floor(fit * 1000 / visible) / 1000 if fit > 0 else 0.0
    while fraction > 0 and math.ceil(visible * fraction) > fit:  # float rounding at the edge
        fraction = round(fraction - 0.001, 3)
    if fraction <= 0:
        raise DoesNotFitError(
            f"{budget.name} has {format_bytes(device.free_min)} free at its lowest; vLLM's CUDA context "
            f"({format_bytes(CUDA_CONTEXT_BYTES)}), runtime slack ({format_bytes(RUNTIME_SLACK_BYTES)}) and "
            f"the desktop margin ({format_bytes(budget.headroom)}) leave nothing for vLLM",
            hint="Close what holds GPU memory (see `homelab gpu`), or use llama.cpp with a smaller GGUF.",
        )
    return Utilization(
        device=budget.name,
        visible_total=visible,
        reserved=budget.reserved,
        free_min=device.free_min,
        desktop_peak=device.desktop_peak,
        headroom=budget.headroom,
        display_active=budget.display_active,
        cuda_context=CUDA_CONTEXT_BYTES,
        runtime_slack=RUNTIME_SLACK_BYTES,
        fraction=fraction,
    )


@dataclass(frozen=True, slots=True)
class MemoryPrice:
    """vLLM's budget spent in its own order; the KV pool is what is left."""

    requested: int
    weights: int
    activation: Activation
    non_torch: int
    cuda_graphs: int
    graph_sizes: int

    @property
    def before_kv(self) -> int:
        return self.weights + self.activation.total + self.non_torch + self.cuda_graphs

    @property
    def kv_pool(self) -> int:
        """vLLM's "Available KV cache memory" (negative: the weights and scratch do not fit)."""
        return self.requested - self.before_kv

    @property
    def planned_pool(self) -> int:
        """The part of the pool homelab plans lengths into (see ESTIMATE_MARGIN_BYTES)."""
        return self.kv_pool - ESTIMATE_MARGIN_BYTES


def price_memory(
    model: ModelConfig, utilization: Utilization, max_num_batched_tokens: int, max_num_seqs: int
) -> MemoryPrice:
    """Spend ``util × total`` as vLLM does; see :class:`MemoryPrice`."""
    return MemoryPrice(
        requested=utilization.requested,
        weights=model.weights.total,
        activation=activation_estimate(model, max_num_batched_tokens, max_num_seqs),
        non_torch=NON_TORCH_BYTES,
        cuda_graphs=cuda_graph_bytes(max_num_seqs, max_num_batched_tokens),
        graph_sizes=len(capture_sizes(max_num_seqs, max_num_batched_tokens)),
    )
