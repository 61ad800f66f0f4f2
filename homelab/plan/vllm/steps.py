"""The working of a vLLM plan, as rows a person can check on paper.

Same rows as the llama.cpp plan's working (:mod:`homelab.plan.steps`,
:class:`~homelab.plan.working.Step`): each names the quantity, the arithmetic and the
result (in bytes, tokens or a count); ``render_step`` makes it a line.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from homelab.plan.vllm.pricing import ESTIMATE_MARGIN_BYTES, MemoryPrice, Utilization
from homelab.plan.working import Step
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.vllm.plan import VllmPlan

_KIND_WORDS = {"full": "full attention", "sliding": "sliding window", "linear": "linear attention"}


def _b(n: int) -> str:
    return f"{n:,} B" if abs(n) < 1024 else f"{n:,} B ({format_bytes(n)})"


def _term(what: str, value: int, sign: str = "") -> Step:
    """A byte figure that counts into the step above it (taken off, or what is left)."""
    return Step(what, _b(value), value, level=1, sign=sign)


def describe(plan: VllmPlan) -> list[Step]:
    """Every step of the plan, in order: the model, the card's fraction for vLLM, the
    budget spent in vLLM's order, the KV cache's shape, and the flags that follow."""
    u, mem = plan.utilization, plan.memory
    assert u is not None and mem is not None  # the GPU plan (the CPU plan has its own steps)
    return [
        *_model_steps(plan),
        *_utilization_steps(u),
        *_budget_steps(mem),
        *_kv_steps(plan, mem.kv_pool),
        *_flag_steps(plan),
    ]


def _model_steps(plan: VllmPlan) -> list[Step]:
    """The model's layers, the tensor-parallel split (if any), MLA and the weights."""
    m = plan.model
    layout = ", ".join(f"{n} {_KIND_WORDS[k]}" for k, n in Counter(m.layer_kinds).items())
    arch = ", ".join(m.architectures) or m.model_type
    limit = (
        f"config allows {m.max_model_len:,} tokens" if m.max_model_len else "config names no length"
    )
    steps = [
        Step(
            "Model",
            f"{m.name} ({arch}), {m.n_layers} layers: {layout}; {m.dtype or 'no dtype'}; {limit}",
            m.n_layers,
        )
    ]
    if plan.tensor_parallel is not None:
        tp = plan.tensor_parallel
        steps.append(
            Step(
                "Tensor parallel",
                f"--tensor-parallel-size {tp.size} over {', '.join(tp.cards)}: every figure below "
                f"is one card's (weights / {tp.size}, {tp.kv_heads_per_card} KV head(s) per card)",
                tp.size,
            )
        )
    if m.mla is not None:
        steps.append(
            Step(
                "attention is MLA",
                f"kv_lora_rank {m.mla.kv_lora_rank} + rope dims {m.mla.qk_rope_head_dim} per token",
                level=1,
            )
        )
    offload = plan.experts_offload
    total = m.weights.total + (offload.bytes if offload else 0)
    if m.weights.source == "index":
        what, formula = "Weights (index total_size, shards not downloaded yet)", _b(total)
    else:
        what = "Weights"
        formula = f"{len(m.weights.files)} {m.weights.source} file(s), {_b(total)}"
    steps.append(Step(what, formula, total))
    if offload:
        steps.append(
            _term(
                f"routed experts of {offload.n_layers} layer(s) in system RAM "
                f"(--cpu-offload-gb {offload.gb_flag} --cpu-offload-params experts)",
                offload.bytes,
                "−",
            )
        )
        steps.append(_term("weights on the card", m.weights.total, "="))
    return steps


def _utilization_steps(u: Utilization) -> list[Step]:
    """The card's memory, less what vLLM cannot have, as ``--gpu-memory-utilization``."""
    desktop = "unknown" if u.desktop_peak is None else _b(u.desktop_peak)
    steps = [
        Step("Card", u.device),
        _term(f"CUDA-visible total (NVML total − reserved {_b(u.reserved)})", u.visible_total),
        Step(
            "free at its lowest while sampled",
            f"{_b(u.free_min)} (desktop at its peak: {desktop})",
            u.free_min,
            level=1,
        ),
    ]
    for label, value in (
        ("vLLM's CUDA context (est.)", u.cuda_context),
        ("runtime slack outside vLLM's budget (est.)", u.runtime_slack),
        (
            "desktop margin (the card drives a display)" if u.display_active else "headroom",
            u.headroom,
        ),
    ):
        steps.append(_term(label, value, "−"))
    steps.append(_term("vLLM may ask for", u.free_at_check, "="))
    steps.append(
        Step(
            f"--gpu-memory-utilization {u.fraction:.3f}",
            f"= {_b(u.free_at_check)} / {_b(u.visible_total)}, floored; "
            f"vLLM asks ceil({u.fraction:.3f} × total) = {_b(u.requested)} ≤ free at its check: it starts",
            u.requested,
            sep=" ",
        )
    )
    return steps


def _budget_steps(mem: MemoryPrice) -> list[Step]:
    """vLLM's budget spent in its own order: weights, activations, outside torch, graphs, KV."""
    act = mem.activation
    return [
        Step(f"Budget {_b(mem.requested)}, spent in vLLM's order", value=mem.requested),
        _term("weights (file sizes)", mem.weights, "−"),
        Step(
            "activation peak (est.)",
            f"{act.tokens:,} batched tokens × {act.bytes_per_token:,} B "
            f"+ logits {act.rows} row(s) × {act.vocab:,} vocab × 6 B = {_b(act.total)}",
            act.total,
            level=1,
            sign="−",
        ),
        _term("memory outside torch (est.)", mem.non_torch, "−"),
        _term(f"CUDA graphs (est., {mem.graph_sizes} capture sizes)", mem.cuda_graphs, "−"),
        _term("KV pool (vLLM logs it as 'Available KV cache memory')", mem.kv_pool, "="),
    ]


def _kv_steps(plan: VllmPlan, kv_pool: int) -> list[Step]:
    """A token's KV bytes per layer kind, and the ``kv_pool`` bytes cut into blocks of pages."""
    m, kv = plan.model, plan.layout
    kinds = Counter(m.layer_kinds)
    dtype = f"{plan.kv_cache_dtype} ({kv.element_bytes} B per element)"
    if m.mla is not None:
        per_layer = f"{m.mla.width} latent × {kv.element_bytes} B"
    else:
        per_layer = f"2 × {m.num_kv_heads} kv heads × {m.head_dim} × {kv.element_bytes} B"
    steps = [
        Step(
            f"KV per token per layer at {dtype}",
            f"{per_layer} = {kv.token_layer_bytes:,} B",
            kv.token_layer_bytes,
        ),
        Step(
            "",
            f"{kv.full_layers} full-attention layers = {kv.kv_bytes_per_token:,} B per token of context",
            kv.kv_bytes_per_token,
            level=1,
            sign="×",
        ),
    ]
    if kinds.get("sliding"):
        window = kv.sliding_window or 0
        steps.append(
            Step(
                "",
                f"{kinds['sliding']} sliding-window layers (window {window:,}) keep at most "
                f"min({window - 1:,} + {kv.max_num_batched_tokens:,}, max-model-len) tokens each, "
                "whatever the context",
                level=1,
            )
        )
    if kinds.get("linear") and kv.linear_state_bytes is not None and m.linear is not None:
        lin = m.linear
        steps.append(
            Step(
                f"{kinds['linear']} linear-attention layers keep a state per request",
                f"conv {lin.conv_elements:,} × {lin.conv_dtype_bytes} B + recurrent "
                f"{lin.temporal_elements:,} × {lin.ssm_dtype_bytes} B = {kv.linear_state_bytes:,} B, "
                f"padded to one {kv.block_size}-token attention page; 2 per request",
                kv.linear_state_bytes,
                level=1,
            )
        )
    groups = Counter(g.kind for g in kv.groups)
    blocks = kv.num_blocks(kv_pool)
    steps.append(
        Step(
            "",
            f"Blocks of {kv.block_size} tokens; {len(kv.groups)} group(s) of {kv.group_size} layers "
            f"({', '.join(f'{n} {_KIND_WORDS[k]}' for k, n in groups.items())}); one block of the pool = "
            f"{kv.group_size} × {kv.page_bytes:,} B page = {kv.bytes_per_block:,} B; "
            f"{blocks:,} blocks, one kept back",
            blocks,
        )
    )
    return steps


def _flag_steps(plan: VllmPlan) -> list[Step]:
    """The length, sequences and batch flags, and what vLLM should log at start-up."""
    kv = plan.layout
    return [
        Step(
            f"--max-model-len {plan.max_model_len:,}",
            f"{kv.blocks_per_request(plan.max_model_len):,} blocks = "
            f"{_b(plan.request_bytes)} per request; fits (longest planned, {format_bytes(ESTIMATE_MARGIN_BYTES)} "
            f"of the pool kept for estimate error: {plan.longest_fitting:,}; vLLM's own limit ≈ {plan.vllm_longest:,})",
            plan.request_bytes,
        ),
        Step(
            "Expect at start-up",
            f"GPU KV cache size ≈ {plan.predicted_kv_tokens:,} tokens, maximum concurrency "
            f"≈ {plan.predicted_concurrency:.2f}x for {plan.max_model_len:,} tokens per request",
            plan.predicted_kv_tokens,
        ),
        Step(
            "",
            f"--max-num-seqs {plan.max_num_seqs} (full-length requests that fit at once, at most 16); "
            f"--max-num-batched-tokens {plan.max_num_batched_tokens:,} for {plan.workload.describe()}",
            plan.max_num_seqs,
        ),
        Step(
            "--enable-prefix-caching",
            "always passed, so reuse does not depend on the vLLM release's default "
            "(off for hybrid models before 0.28)",
        ),
    ]
