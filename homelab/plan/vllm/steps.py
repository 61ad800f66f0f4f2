"""The working of a vLLM plan, as lines a person can check on paper.

Same style as the llama.cpp plan's working (:mod:`homelab.plan.steps`): each line
names the quantity, the arithmetic and the result.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from homelab.plan.vllm.pricing import ESTIMATE_MARGIN_BYTES
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.vllm.plan import VllmPlan

_KIND_WORDS = {"full": "full attention", "sliding": "sliding window", "linear": "linear attention"}


def _b(n: int) -> str:
    return f"{n:,} B" if abs(n) < 1024 else f"{n:,} B ({format_bytes(n)})"


def describe(plan: VllmPlan) -> list[str]:
    """Every step of the plan, in order."""
    m, u, mem, kv = plan.model, plan.utilization, plan.memory, plan.layout
    kinds = Counter(m.layer_kinds)
    layout = ", ".join(f"{n} {_KIND_WORDS[k]}" for k, n in kinds.items())
    arch = ", ".join(m.architectures) or m.model_type
    limit = (
        f"config allows {m.max_model_len:,} tokens" if m.max_model_len else "config names no length"
    )
    steps = [
        f"Model: {m.name} ({arch}), {m.n_layers} layers: {layout}; {m.dtype or 'no dtype'}; {limit}"
    ]
    if m.mla is not None:
        steps.append(
            f"  attention is MLA: kv_lora_rank {m.mla.kv_lora_rank} + rope dims {m.mla.qk_rope_head_dim} per token"
        )
    if m.weights.source == "index":
        steps.append(
            f"Weights (index total_size, shards not downloaded yet): {_b(m.weights.total)}"
        )
    else:
        files = f"{len(m.weights.files)} {m.weights.source} file(s)"
        steps.append(f"Weights: {files}, {_b(m.weights.total)}")

    steps.append(f"Card: {u.device}")
    steps.append(
        f"  CUDA-visible total (NVML total − reserved {_b(u.reserved)}): {_b(u.visible_total)}"
    )
    desktop = "unknown" if u.desktop_peak is None else _b(u.desktop_peak)
    steps.append(
        f"  free at its lowest while sampled: {_b(u.free_min)} (desktop at its peak: {desktop})"
    )
    for label, value in (
        ("vLLM's CUDA context (est.)", u.cuda_context),
        ("runtime slack outside vLLM's budget (est.)", u.runtime_slack),
        (
            "desktop margin (the card drives a display)" if u.display_active else "headroom",
            u.headroom,
        ),
    ):
        steps.append(f"  − {label}: {_b(value)}")
    steps.append(f"  = vLLM may ask for: {_b(u.free_at_check)}")
    steps.append(
        f"--gpu-memory-utilization {u.fraction:.3f} = {_b(u.free_at_check)} / {_b(u.visible_total)}, floored; "
        f"vLLM asks ceil({u.fraction:.3f} × total) = {_b(u.requested)} ≤ free at its check: it starts"
    )

    act = mem.activation
    steps.append(f"Budget {_b(mem.requested)}, spent in vLLM's order:")
    steps.append(f"  − weights (file sizes): {_b(mem.weights)}")
    steps.append(
        f"  − activation peak (est.): {act.tokens:,} batched tokens × {act.bytes_per_token:,} B "
        f"+ logits {act.rows} row(s) × {act.vocab:,} vocab × 6 B = {_b(act.total)}"
    )
    steps.append(f"  − memory outside torch (est.): {_b(mem.non_torch)}")
    steps.append(f"  − CUDA graphs (est., {mem.graph_sizes} capture sizes): {_b(mem.cuda_graphs)}")
    steps.append(f"  = KV pool (vLLM logs it as 'Available KV cache memory'): {_b(mem.kv_pool)}")

    dtype = f"{plan.kv_cache_dtype} ({kv.element_bytes} B per element)"
    if m.mla is not None:
        per_layer = f"{m.mla.width} latent × {kv.element_bytes} B"
    else:
        per_layer = f"2 × {m.num_kv_heads} kv heads × {m.head_dim} × {kv.element_bytes} B"
    steps.append(f"KV per token per layer at {dtype}: {per_layer} = {kv.token_layer_bytes:,} B")
    steps.append(
        f"  × {kv.full_layers} full-attention layers = {kv.kv_bytes_per_token:,} B per token of context"
    )
    if kinds.get("sliding"):
        window = kv.sliding_window or 0
        steps.append(
            f"  {kinds['sliding']} sliding-window layers (window {window:,}) keep at most "
            f"min({window - 1:,} + {kv.max_num_batched_tokens:,}, max-model-len) tokens each, whatever the context"
        )
    if kinds.get("linear") and kv.linear_state_bytes is not None and m.linear is not None:
        lin = m.linear
        steps.append(
            f"  {kinds['linear']} linear-attention layers keep a state per request: conv {lin.conv_elements:,} × "
            f"{lin.conv_dtype_bytes} B + recurrent {lin.temporal_elements:,} × {lin.ssm_dtype_bytes} B = "
            f"{kv.linear_state_bytes:,} B, padded to one {kv.block_size}-token attention page; 2 per request"
        )
    groups = Counter(g.kind for g in kv.groups)
    steps.append(
        f"Blocks of {kv.block_size} tokens; {len(kv.groups)} group(s) of {kv.group_size} layers "
        f"({', '.join(f'{n} {_KIND_WORDS[k]}' for k, n in groups.items())}); one block of the pool = "
        f"{kv.group_size} × {kv.page_bytes:,} B page = {kv.bytes_per_block:,} B; "
        f"{kv.num_blocks(mem.kv_pool):,} blocks, one kept back"
    )
    steps.append(
        f"--max-model-len {plan.max_model_len:,}: {kv.blocks_per_request(plan.max_model_len):,} blocks = "
        f"{_b(plan.request_bytes)} per request; fits (longest planned, {format_bytes(ESTIMATE_MARGIN_BYTES)} "
        f"of the pool kept for estimate error: {plan.longest_fitting:,}; vLLM's own limit ≈ {plan.vllm_longest:,})"
    )
    steps.append(
        f"Expect at start-up: GPU KV cache size ≈ {plan.predicted_kv_tokens:,} tokens, maximum concurrency "
        f"≈ {plan.predicted_concurrency:.2f}x for {plan.max_model_len:,} tokens per request"
    )
    steps.append(
        f"--max-num-seqs {plan.max_num_seqs} (full-length requests that fit at once, at most 16); "
        f"--max-num-batched-tokens {plan.max_num_batched_tokens:,} for {plan.workload.describe()}"
    )
    steps.append(
        "--enable-prefix-caching: always passed, so reuse does not depend on the vLLM release's default "
        "(off for hybrid models before 0.28)"
    )
    return steps
