"""What llama-server needs on the card besides weights and KV: the engine's state.

Three parts. The CUDA context (driver state, cuBLAS handles, the memory pool),
which no llama.cpp number reports: Ollama keeps 457 MiB for it, we keep 456 MiB.
The compute buffer, which llama.cpp sizes by reserving its worst-case graph:
logits for one row per slot (llama-server's n_outputs_max), the attention mask,
one layer's F32 activations for a micro-batch, and (on CUDA, since
llama.cpp PR #23907) F16 copies of the largest layer's K and V when the cache is
quantized and flash attention runs. That last part grows with the context, so it
is priced per token next to the KV. Everything but the KV is an estimate until
llama-server's own log measures it (``sched_reserve: ... compute buffer size``).
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.gguf.geometry import Geometry
from homelab.plan.kv import KvAllocation, KvSettings
from homelab.plan.layer_shapes import kv_shapes
from homelab.units import MiB

CUDA_CONTEXT_BYTES = 456 * MiB
UNKNOWN_VOCAB = 256_000
"""Vocabulary assumed when the header has no token list (the largest common ones)."""


def fa_scratch_bytes_per_cell(geometry: Geometry, settings: KvSettings, *, on_gpu: bool) -> int:
    """F16 K/V copies the CUDA flash-attention kernels make of one layer, per cache cell.

    Only on a GPU, only with flash attention, only for a cache that is not already
    F16; sized by the widest layer that holds the most cells.
    """
    shapes = kv_shapes(geometry)
    if not on_gpu or not settings.flash_attn or not shapes:
        return 0
    layers = [s for s in shapes if s.kind == "full"] or [s for s in shapes if s.kind == "swa"]
    k_width = max(layer.k_width for layer in layers)
    v_width = max(layer.v_width for layer in layers)
    per_cell = 0
    if settings.type_k != "f16":
        per_cell += 2 * k_width
    if settings.type_v != "f16" and v_width:
        per_cell += 2 * v_width
    return per_cell


@dataclass(frozen=True, slots=True)
class EngineState:
    """The engine's own memory on the device, in bytes, by part."""

    cuda_context: int
    logits: int
    activations: int
    attention_mask: int
    fa_scratch: int
    measured_compute: int | None = None
    """The compute buffer llama-server logged for this model and flags, when known."""

    @property
    def compute_buffer(self) -> int:
        if self.measured_compute is not None:
            return self.measured_compute + self.fa_scratch
        return self.logits + self.activations + self.attention_mask + self.fa_scratch

    @property
    def total(self) -> int:
        return self.cuda_context + self.compute_buffer


def estimate_engine_state(
    geometry: Geometry,
    allocation: KvAllocation,
    settings: KvSettings,
    *,
    on_gpu: bool,
    measured_compute: int | None = None,
) -> EngineState:
    """Engine state at one context size (see the module docstring for the parts)."""
    n_ubatch = min(settings.n_ubatch, settings.n_batch, allocation.n_ctx)
    n_vocab = geometry.n_vocab or UNKNOWN_VOCAB
    n_outputs = min(n_ubatch, settings.n_seq)  # llama-server reserves one output row per slot
    shapes = kv_shapes(geometry)
    widest_kv = max((shape.k_width + shape.v_width for shape in shapes), default=0)
    head_dim = max(
        (shape.k_width // shape.n_head_kv for shape in shapes if shape.n_head_kv), default=0
    )
    q_width = geometry.n_head * head_dim  # queries and the attention output, as wide as all heads
    per_token_activations = 3 * geometry.n_embd + 2 * geometry.n_ff_max + widest_kv + 2 * q_width
    # a chunked delta-net / selective scan keeps several d_inner-wide intermediates per token
    per_token_activations = max(per_token_activations, 6 * geometry.ssm_d_inner)
    full = any(shape.kind == "full" for shape in shapes)
    cells = allocation.ctx_per_seq if full else allocation.swa_cells
    scratch = (
        fa_scratch_bytes_per_cell(geometry, settings, on_gpu=on_gpu) * cells * allocation.n_stream
    )
    if settings.flash_attn:
        mask = 2 * allocation.ctx_per_seq * n_ubatch
    else:
        mask = 4 * allocation.ctx_per_seq * n_ubatch * max(geometry.n_head, 1)
    return EngineState(
        cuda_context=CUDA_CONTEXT_BYTES if on_gpu else 0,
        logits=4 * n_vocab * n_outputs,
        activations=4 * n_ubatch * per_token_activations,
        attention_mask=mask,
        fa_scratch=scratch,
        measured_compute=measured_compute,
    )
