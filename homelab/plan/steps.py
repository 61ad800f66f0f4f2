"""The working of a plan, as rows a person can check on paper.

Each row (:class:`~homelab.plan.working.Step`) names the quantity, the arithmetic and
the result, e.g. ``2 × 8 layers × 4 kv heads × 256 × 34/32 B = 17,408 B`` with the
value 17,408 in bytes; :func:`~homelab.plan.working.render_step` makes it a line.
"""

from __future__ import annotations

from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING

from homelab.gguf.ggml_types import ggml_type
from homelab.plan.decode_bound import decode_steps
from homelab.plan.device_steps import budget_terms, device_lines
from homelab.plan.placement import plan_ram
from homelab.plan.vocabulary import cap_note, slot_count, slots_by_tokens
from homelab.plan.working import Step, byte_figure
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.placement import RamShare
    from homelab.plan.planner import Plan
    from homelab.plan.ram_side import RamCheck


def type_fraction(cache_type: str) -> tuple[str, float]:
    """Bytes per element of a cache type as a person writes it (``34/32`` for q8_0, ``2`` for
    f16), and as a number."""
    kind = ggml_type(cache_type)
    block, size = kind.block_size, kind.type_size
    return (str(size) if block == 1 else f"{size}/{block}"), size / block


def kv_per_token_lines(plan: Plan) -> list[Step]:
    """How one token of context costs what it costs, by group of identical layers."""
    settings = plan.settings
    groups = Counter(map(attrgetter("n_head_kv", "k_width", "v_width"), plan.geometry.full_layers))
    tk, tv = settings.type_k, settings.type_v
    (fk, bk), (fv, bv) = type_fraction(tk), type_fraction(tv)
    rows = []
    for (heads, k_width, v_width), n in sorted(groups.items()):
        head_k = k_width // heads if heads else k_width
        if plan.geometry.is_mla:
            value = n * k_width * bk
            formula = f"{n} layers × K {k_width} (MLA: kv_lora_rank + rope dims, no V) × {fk} B"
        elif k_width == v_width and tk == tv:
            value = 2 * n * k_width * bk
            formula = f"2 × {n} layers × {heads} kv heads × {head_k} × {fk} B"
        else:
            head_v = v_width // heads if heads else v_width
            value = n * (k_width * bk + v_width * bv)
            formula = f"{n} layers × ({heads} × {head_k} × {fk} B for K + {heads} × {head_v} × {fv} B for V)"
        rows.append(Step("", f"{formula} = {value:,.0f} B", round(value), level=1))
    return rows


def _headroom_why(plan: Plan) -> str:
    if plan.split:
        return "each device's own, more on a card that drives a display"
    return "the card drives a display" if plan.budget.display_active else "no display"


def describe_plan(plan: Plan) -> list[Step]:
    """Every step of the plan, in order: the model, the budget, what the engine takes, the
    cost of a token of context, and what fits."""
    return [
        *_model_steps(plan),
        *_budget_steps(plan),
        *_engine_steps(plan),
        *_token_steps(plan),
        *_fit_steps(plan),
        *(decode_steps(plan.decode) if plan.decode is not None else ()),
    ]


def _model_steps(plan: Plan) -> list[Step]:
    """The model's architecture, trained context and which layers keep memory."""
    g = plan.geometry
    kinds = Counter(map(attrgetter("kind"), g.layers))
    layout = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
    return [
        Step(
            "Model",
            f"{g.arch}, {g.n_layer_all} layers, trained on {g.trained_ctx:,} tokens",
            g.trained_ctx,
        ),
        Step(
            "Layers that keep memory",
            f"{len(g.kv_layers)} of {g.n_layer_all} keep KV ({layout})",
            len(g.kv_layers),
        ),
    ]


def _budget_steps(plan: Plan) -> list[Step]:
    """The device's memory, less what is not llama-server's to use."""
    b = plan.budget
    return [
        Step("Memory", f"{b.name}, {byte_figure(b.total)} in all", b.total),
        *budget_terms(b, _headroom_why(plan), "usable by llama-server", level=1),
    ]


def _engine_steps(plan: Plan) -> list[Step]:
    """The weights on the device and the engine state that does not grow per token."""
    g, s, engine = plan.geometry, plan.settings, plan.candidate.engine
    steps = [_weights_step(plan)]
    if ram := plan_ram(plan):
        steps.append(experts_step(ram, mapped=plan.ram is None))
        if plan.rung:  # the planner chose it: why
            steps.append(Step("", plan.rung, level=1))
        if plan.ram is not None:
            steps.extend(ram_check_steps(plan.ram))
    if engine.cuda_context:
        steps.append(
            Step(
                "Engine: CUDA context and cuBLAS",
                f"{byte_figure(engine.cuda_context)} (not in llama.cpp's own figures)",
                engine.cuda_context,
                sep=" ",
            )
        )
    compute_label = "measured" if engine.measured_compute is not None else "estimated"
    compute = engine.compute_buffer - engine.fa_scratch
    steps.append(
        Step(
            f"Engine: compute buffer {compute_label}",
            f"{byte_figure(compute)} "
            f"(logits 4 × {g.n_vocab or 'unknown'} vocab × {min(s.n_ubatch, s.n_seq)} output row(s) = {engine.logits:,} B, "
            f"attention mask {engine.attention_mask:,} B, activations ~{engine.activations:,} B)",
            compute,
            sep=" ",
        )
    )
    left = plan.left_for_conversations
    steps.append(Step("Left for conversations", byte_figure(left), left))
    return steps


def _weights_step(plan: Plan) -> Step:
    """What of the weights is on the device, what stays in system RAM, and the file's bytes
    (a CUDA card's figure is padded: a little above the file's)."""
    weights, on_device = plan.weights, plan.weights_on_device
    if not plan.on_gpu:
        return Step("Weights in RAM", f"{byte_figure(weights.total)}, the whole file", on_device)
    where = "on the devices" if plan.split else "on the card"
    n_blocks = len(weights.per_block)
    held = "every block and the output layer"
    if plan.n_gpu_layers is not None:
        held = f"the output layer and {plan.n_gpu_layers - 1} of {n_blocks} blocks"
    if weights.n_cpu_moe:
        held += ", less the routed experts kept in system RAM (below)"
    text = f"{byte_figure(on_device)} ({held})"
    embedding = weights.embedding
    if embedding is not None:
        text += f"; in system RAM: the input embedding, {format_bytes(embedding)}"
    text += f"; the file holds {format_bytes(weights.total)} of weights"
    if weights.cuda_padded:
        text += " (CUDA pads quantized rows to 512 values and aligns tensors to 128 B)"
    return Step(f"Weights {where}", text, on_device)


def _token_steps(plan: Plan) -> list[Step]:
    """What one token of context costs, and the memory that does not grow with context."""
    g, s, engine = plan.geometry, plan.settings, plan.candidate.engine
    alloc = plan.candidate.allocation
    steps = [Step(f"KV per token at {s.type_k}/{s.type_v} (K/V cache types)")]
    if plan.kv_choice:  # the planner chose them for a CPU plan: why
        steps.append(Step("", plan.kv_choice, level=1))
    steps.extend(kv_per_token_lines(plan))
    per_token = alloc.bytes_per_token
    steps.append(Step("", f"{per_token:,} B per token of context", per_token, level=1, sign="="))
    if engine.fa_scratch:
        per_cell = engine.fa_scratch // max(alloc.ctx_per_seq * alloc.n_stream, 1)
        steps.append(
            Step(
                "flash-attention F16 copy of the widest layer on CUDA",
                f"{per_cell:,} B per token (2 B × its K+V width; llama.cpp PR #23907)",
                per_cell,
                level=1,
                sign="+",
            )
        )
    if g.swa_layers:
        steps.append(
            Step(
                f"Sliding-window layers ({len(g.swa_layers)}, window {g.n_swa:,})",
                f"{alloc.swa_cells:,} cells × {alloc.n_stream} stream(s) = {byte_figure(alloc.swa_bytes)}, "
                "whatever the context",
                alloc.swa_bytes,
            )
        )
    if g.recurrent_layers:
        steps.append(
            Step(
                "Recurrent state",
                f"{len(g.recurrent_layers)} layers × 4 B × ({g.n_embd_r:,} + {g.n_embd_s:,}) "
                f"× {max(1, s.n_seq)} sequence(s) = {byte_figure(alloc.recurrent_bytes)}",
                alloc.recurrent_bytes,
            )
        )
    return steps


def experts_step(ram: RamShare, *, mapped: bool = True) -> Step:
    """How many blocks' routed experts stay in system RAM, and the RAM side's bytes (the
    mapped span here only when no RAM check prices it buffer by buffer)."""
    n = ram.n_cpu_moe
    which = "block 0" if n == 1 else f"blocks 0–{n - 1}"
    span = f", mapped from the file {byte_figure(ram.mapped)}" if mapped else ""
    return Step(
        f"Routed experts in system RAM (--n-cpu-moe {n})",
        f"{which}, {n} of {ram.n_blocks} layers: {byte_figure(ram.experts)} off the card; "
        f"in RAM with the input embedding {byte_figure(ram.tensors)}{span}",
        ram.experts,
    )


def ram_check_steps(check: RamCheck) -> list[Step]:
    """The RAM side as llama-server's load log will print it, and the RAM free for it."""
    side = check.side
    repack = "unknown" if side.repack is None else byte_figure(side.repack)
    rows = [
        Step(
            "System RAM the engine holds",
            f"the CPU's mapped tensors {byte_figure(side.resident)} (CPU_Mapped span "
            f"{byte_figure(side.mapped)}) + CPU_REPACK {repack} + "
            f"CPU compute ~{byte_figure(side.compute)} (estimated)",
            side.total,
        )
    ]
    if check.available is None:
        return [*rows, Step("", f"not checked: {check.unknown_reason()}", level=1)]
    usable = max(check.available - check.headroom, 0)  # less than the headroom: none
    verdict = {True: "fits", False: "would swap", None: "not checked"}[check.fits]
    rows.append(
        Step(
            "System RAM free for it",
            f"{byte_figure(check.available)} available − {format_bytes(check.headroom)} "
            f"headroom = {byte_figure(usable)}: {verdict}",
            usable,
        )
    )
    return rows


def _slot_note(plan: Plan) -> str:
    """What a slot holds, when it is not just its tokens: one shared pool, more cells than
    a request may use (the trained context caps it), or the trained cap itself."""
    alloc, trained = plan.candidate.allocation, plan.geometry.trained_ctx
    if plan.settings.unified:
        return " (one shared pool, -kvu)"
    if alloc.ctx_per_seq > alloc.ctx_per_slot:
        return (
            f" ({alloc.ctx_per_seq:,} cells allocated to each; a request is capped at the "
            f"{trained:,} tokens the model was trained on)"
        )
    return cap_note(plan)


def _fit_steps(plan: Plan) -> list[Step]:
    """The tokens that fit, the slots they make, the KV allocated and the spare memory."""
    b, s, engine = plan.budget, plan.settings, plan.candidate.engine
    alloc = plan.candidate.allocation
    steps = [
        Step(
            f"Tokens that fit with {slot_count(s.n_seq)}",
            f"{plan.tokens_fit:,}",
            plan.tokens_fit,
        ),
        Step(
            f"Slots for {plan.request.workload.describe()}",
            slots_by_tokens(s.n_seq, alloc.ctx_per_slot) + _slot_note(plan),
            s.n_seq,
        ),
        Step(
            "KV allocated",
            f"{alloc.n_ctx:,} cells → {byte_figure(alloc.total)} "
            f"(full {alloc.full_bytes:,} + SWA {alloc.swa_bytes:,} + recurrent {alloc.recurrent_bytes:,} B)",
            alloc.total,
        ),
    ]
    if plan.n_gpu_layers is not None:
        steps.append(
            Step(
                "Partial offload",
                f"-ngl {plan.n_gpu_layers} (output layer + {plan.n_gpu_layers - 1} blocks)",
                plan.n_gpu_layers,
            )
        )
    if plan.split:
        steps.extend(device_lines(plan))
    spare = b.usable - plan.weights_on_device - engine.total - alloc.total
    steps.append(
        Step(
            "Spare after the plan",
            f"{byte_figure(spare)} (plus the {format_bytes(b.headroom)} headroom)",
            spare,
        )
    )
    return steps
