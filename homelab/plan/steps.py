"""The working of a plan, as lines a person can check on paper.

Each line names the quantity, the arithmetic and the result, e.g.
``2 × 8 layers × 4 kv heads × 256 × 34/32 B = 17,408 B per token``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from homelab.gguf.ggml_types import ggml_type
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.planner import Plan


def type_fraction(cache_type: str) -> str:
    """Bytes per element of a cache type as a person writes it: ``34/32`` for q8_0, ``2`` for f16."""
    kind = ggml_type(cache_type)
    block, size = kind.block_size, kind.type_size
    return str(size) if block == 1 else f"{size}/{block}"


def _b(n: int) -> str:
    return f"{n:,} B" if n < 1024 else f"{n:,} B ({format_bytes(n)})"


def kv_per_token_lines(plan: Plan) -> list[str]:
    """How one token of context costs what it costs, by group of identical layers."""
    settings = plan.settings
    groups = Counter(
        (layer.n_head_kv, layer.k_width, layer.v_width) for layer in plan.geometry.full_layers
    )
    tk, tv = settings.type_k, settings.type_v
    fk, fv = type_fraction(tk), type_fraction(tv)
    lines = []
    for (heads, k_width, v_width), n in sorted(groups.items()):
        head_k = k_width // heads if heads else k_width
        if plan.geometry.is_mla:
            lines.append(
                f"  {n} layers × K {k_width} (MLA: kv_lora_rank + rope dims, no V) × {fk} B"
                f" = {n * k_width * _num(fk):,.0f} B"
            )
        elif k_width == v_width and tk == tv:
            lines.append(
                f"  2 × {n} layers × {heads} kv heads × {head_k} × {fk} B = {2 * n * k_width * _num(fk):,.0f} B"
            )
        else:
            head_v = v_width // heads if heads else v_width
            lines.append(
                f"  {n} layers × ({heads} × {head_k} × {fk} B for K + {heads} × {head_v} × {fv} B for V)"
                f" = {n * (k_width * _num(fk) + v_width * _num(fv)):,.0f} B"
            )
    return lines


def _num(fraction: str) -> float:
    if "/" in fraction:
        a, b = fraction.split("/")
        return int(a) / int(b)
    return float(fraction)


def describe_plan(plan: Plan) -> list[str]:
    """Every step of the plan, in order."""
    b = plan.budget
    g = plan.geometry
    c = plan.candidate
    alloc = c.allocation
    s = c.settings
    engine = c.engine
    steps = [f"Model: {g.arch}, {g.n_layer_all} layers, trained on {g.trained_ctx:,} tokens"]
    kinds = Counter(layer.kind for layer in g.layers)
    layout = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    steps.append(
        f"Layers that keep memory: {len(g.kv_layers)} of {g.n_layer_all} keep KV ({layout})"
    )
    steps.append(f"Memory: {b.name}, {_b(b.total)} in all")
    for label, value in (
        ("reserved by the driver", b.reserved),
        ("desktop (its peak while sampled)", b.desktop),
        ("other processes", b.other),
        (
            f"headroom ({'the card drives a display' if b.display_active else 'no display'})",
            b.headroom,
        ),
    ):
        steps.append(f"  − {label}: {_b(value)}")
    steps.append(f"  = usable by llama-server: {_b(b.usable)}")
    where = "on the card" if plan.on_gpu else "in RAM"
    embd_note = " (the input embedding stays in system RAM)" if plan.on_gpu else ""
    steps.append(
        f"Weights {where}: {_b(plan.weights_on_device)} of {_b(plan.weights.total)}{embd_note}"
    )
    if engine.cuda_context:
        steps.append(
            f"Engine: CUDA context and cuBLAS {_b(engine.cuda_context)} (not in llama.cpp's own figures)"
        )
    compute_label = "measured" if engine.measured_compute is not None else "estimated"
    steps.append(
        f"Engine: compute buffer {compute_label} {_b(engine.compute_buffer - engine.fa_scratch)} "
        f"(logits 4 × {g.n_vocab or 'unknown'} vocab × {min(s.n_ubatch, s.n_seq)} output row(s) = {engine.logits:,} B, "
        f"attention mask {engine.attention_mask:,} B, activations ~{engine.activations:,} B)"
    )
    steps.append(f"Left for conversations: {_b(plan.left_for_conversations)}")
    steps.append(f"KV per token at {s.type_k}/{s.type_v} (K/V cache types):")
    steps.extend(kv_per_token_lines(plan))
    steps.append(f"  = {alloc.bytes_per_token:,} B per token of context")
    if engine.fa_scratch:
        per_cell = engine.fa_scratch // max(alloc.ctx_per_seq * alloc.n_stream, 1)
        steps.append(
            f"  + flash-attention F16 copy of the widest layer on CUDA: {per_cell:,} B per token "
            f"(2 B × its K+V width; llama.cpp PR #23907)"
        )
    if g.swa_layers:
        steps.append(
            f"Sliding-window layers ({len(g.swa_layers)}, window {g.n_swa:,}): "
            f"{alloc.swa_cells:,} cells × {alloc.n_stream} stream(s) = {_b(alloc.swa_bytes)}, whatever the context"
        )
    if g.recurrent_layers:
        steps.append(
            f"Recurrent state: {len(g.recurrent_layers)} layers × 4 B × ({g.n_embd_r:,} + {g.n_embd_s:,}) "
            f"× {max(1, s.n_seq)} sequence(s) = {_b(alloc.recurrent_bytes)}"
        )
    steps.append(f"Tokens that fit with {s.n_seq} slot(s): {plan.tokens_fit:,}")
    slot_note = "shared pool (-kvu)" if s.unified else f"{alloc.ctx_per_seq:,} each"
    steps.append(
        f"Slots for {plan.request.workload.describe()}: {s.n_seq} × {alloc.ctx_per_slot:,} tokens ({slot_note})"
    )
    steps.append(
        f"KV allocated: {alloc.n_ctx:,} cells → {_b(alloc.total)} "
        f"(full {alloc.full_bytes:,} + SWA {alloc.swa_bytes:,} + recurrent {alloc.recurrent_bytes:,} B)"
    )
    if plan.n_gpu_layers is not None:
        steps.append(
            f"Partial offload: -ngl {plan.n_gpu_layers} (output layer + {plan.n_gpu_layers - 1} blocks)"
        )
    spare = b.usable - plan.weights_on_device - engine.total - alloc.total
    steps.append(
        f"Spare after the plan: {_b(spare)} (plus the {format_bytes(b.headroom)} headroom)"
    )
    return steps
