"""The vLLM plan: from a model folder (or cached repo) and a probed card to vLLM's flags.

The utilization fraction comes from NVML (see :mod:`homelab.plan.vllm.pricing`);
the budget it buys is spent as vLLM spends it; what is left is the KV pool; the
pool says which ``--max-model-len`` fits and how many full-length requests run at
once (``--max-num-seqs``). A length that does not fit is refused here, with the
numbers and the length that does, instead of four minutes into vLLM's boot.

On a GPU the plan hands vLLM ``--gpu-memory-utilization`` and lets vLLM measure the pool,
unless a KV cache memory is asked for (then ``--kv-cache-memory-bytes``, which puts the
pool first in the order and makes the refusal exact). Not by default: vLLM skips its
memory profiling when given the bytes and does not check them against the card, so an
error in homelab's estimates of the activation peak, CUDA graphs and memory outside
torch (estimates never yet checked on a real GPU run) would become an out-of-memory
crash instead of a smaller measured pool. Without a card (vLLM's CPU backend, see
:mod:`homelab.plan.vllm.cpu`) there is nothing to measure and the bytes are always passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from homelab.errors import DoesNotFitError, UsageError
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.budget import device_budget, pick_device
from homelab.plan.experts_rung import system_ram
from homelab.plan.options import PlanOptions
from homelab.plan.vllm.config import ModelConfig, load_model_config
from homelab.plan.vllm.kv import KvLayout, cdiv, kv_layout
from homelab.plan.vllm.length import LengthAsk, choose_len, most_in_pool
from homelab.plan.vllm.offload import ExpertOffload, offload_experts
from homelab.plan.vllm.pricing import MemoryPrice, Utilization, price_memory, utilization_for
from homelab.plan.vllm.steps import describe
from homelab.plan.vllm.tensor_parallel import CardSlice, tensor_parallel
from homelab.plan.working import Step
from homelab.plan.workload import AGENT, Workload
from homelab.units import format_bytes

FALLBACK_MODEL_LEN = 2048
"""vLLM's own assumption when a config names no context length."""


@dataclass(frozen=True, slots=True)
class VllmPlan:
    """vLLM's flags, the budget they came from, and the working (``steps``)."""

    model: ModelConfig
    model_ref: str
    """What ``vllm serve`` gets: the folder that was priced (never a fresh download)."""
    served_model_name: str | None
    """The repo id, when the model came from the HF cache (clients ask for it by name)."""
    workload: Workload
    utilization: Utilization | None
    """The GPU budget (None on vLLM's CPU backend)."""
    memory: MemoryPrice | None
    """The GPU budget spent in vLLM's order (None on the CPU backend)."""
    layout: KvLayout
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_dtype: str
    longest_fitting: int
    """The largest --max-model-len homelab plans into this pool (its estimate margin kept free)."""
    vllm_longest: int
    """The largest --max-model-len the estimated pool holds in full (what vLLM would estimate)."""
    warnings: tuple[str, ...] = ()
    steps: tuple[Step, ...] = ()
    tensor_parallel: CardSlice | None = None
    """Several equal cards: ``model`` and the pricing are one card's slice."""

    @property
    def tensor_parallel_size(self) -> int:
        return 1 if self.tensor_parallel is None else self.tensor_parallel.size

    backend: str = "cuda"
    """vLLM's device: ``cuda`` (an NVIDIA card) or ``cpu`` (its CPU build, from RAM)."""
    kv_cache_memory_bytes: int | None = None
    """The KV pool handed to vLLM (``--kv-cache-memory-bytes``); None: vLLM measures it."""
    experts_offload: ExpertOffload | None = None
    """Routed experts kept in system RAM (``--cpu-offload-gb`` + ``--cpu-offload-params
    experts``); ``model.weights.total`` is then what stays on the card."""

    @property
    def gpu_memory_utilization(self) -> float | None:
        return None if self.utilization is None else self.utilization.fraction

    @property
    def kv_pool(self) -> int:
        """The KV pool: the one handed to vLLM, else the estimate of what it will measure."""
        if self.kv_cache_memory_bytes is not None:
            return self.kv_cache_memory_bytes
        assert self.memory is not None
        return self.memory.kv_pool

    @property
    def tokens_fit(self) -> int:
        """The pool in tokens (what vLLM logs as "KV cache size: N tokens")."""
        return self.predicted_kv_tokens

    @property
    def request_bytes(self) -> int:
        return self.layout.request_bytes(self.max_model_len)

    @property
    def predicted_kv_tokens(self) -> int:
        """What vLLM should log as "GPU KV cache size: N tokens"."""
        return self.layout.cache_tokens(self.kv_pool, self.max_model_len)

    @property
    def predicted_concurrency(self) -> float:
        """What vLLM should log as "Maximum concurrency for N tokens per request"."""
        return self.layout.max_concurrency(self.kv_pool, self.max_model_len)


def plan_vllm(
    model_ref: str | Path,
    report: GpuReport,
    options: PlanOptions,
    *,
    hf_cache_dir: Path | None = None,
    ram: Callable[[], CpuMemory | None] = system_ram,
) -> VllmPlan:
    """The vLLM plan the options describe: context -> ``--max-model-len``, slots ->
    ``--max-num-seqs``, the cache type -> ``--kv-cache-dtype`` (see :func:`vllm_plan`);
    on a machine without an NVIDIA card, vLLM's CPU backend from the RAM budget
    (:func:`homelab.plan.vllm.cpu.vllm_cpu_plan`). ``options`` are built for the vLLM
    engine (its default KV cache type applies where none is set).

    Raises:
        UsageError: K and V cache types differ (vLLM has one KV cache type), or see
            :func:`vllm_plan`.
    """
    if options.type_k != options.type_v:
        raise UsageError(
            f"vLLM has one KV cache type, not K {options.type_k} and V {options.type_v}",
            hint="Use one cache type for both K and V.",
        )
    gpus = options.card.gpus
    if pick_device(report, gpus[0] if gpus else None) is None:
        from homelab.plan.vllm.cpu import vllm_cpu_plan

        plan = vllm_cpu_plan(model_ref, report, options, hf_cache_dir=hf_cache_dir)
        if not options.card.n_cpu_moe:
            return plan
        note = "The plan is for system RAM: the experts are there with everything else."
        return replace(plan, warnings=(note, *plan.warnings))
    return vllm_plan(
        model_ref,
        report,
        kv_cache_memory=options.engine.kv_cache_memory,
        force=options.serve.force,
        max_model_len=options.workload.ctx,
        max_num_seqs=options.workload.slots,
        kv_cache_dtype=options.type_k,
        workload=options.workload.per_slot or AGENT,
        device_indices=gpus,
        hf_cache_dir=hf_cache_dir,
        n_cpu_moe=options.card.n_cpu_moe,
        ram=ram,
    )


def vllm_plan(
    model_dir_or_repo: str | Path,
    report: GpuReport,
    *,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    kv_cache_dtype: str = "auto",
    max_num_batched_tokens: int = 2048,
    workload: Workload = AGENT,
    device_indices: tuple[int, ...] | None = None,
    hf_cache_dir: Path | None = None,
    kv_cache_memory: int | None = None,
    force: bool = False,
    n_cpu_moe: int | None = None,
    ram: Callable[[], CpuMemory | None] = system_ram,
) -> VllmPlan:
    """Price vLLM on this card before booting it (``kv_cache_memory``: hand vLLM this
    pool instead of letting it measure one; ``force``: plan an asked length vLLM will
    refuse, with a warning, so its own refusal can be seen; ``n_cpu_moe``: keep the routed
    experts of that many leading layers in system RAM, :mod:`homelab.plan.vllm.offload`, weighed
    against ``ram()``).

    Raises:
        UsageError: a flag vLLM would reject, no NVIDIA GPU, or a length beyond the model's.
        DoesNotFitError: the weights and scratch do not fit, or the asked-for (or the
            workload's) --max-model-len does not; the message has the numbers and the hint
            the length that fits.
        ModelFileError: the model cannot be read or sized.
    """
    _check_flags(max_model_len, max_num_seqs, max_num_batched_tokens)
    model = load_model_config(str(model_dir_or_repo), cache_dir=hf_cache_dir)
    model, utilization, tp, warnings = _on_cards(model, report, device_indices)
    offload = None
    if n_cpu_moe:
        model, offload = _experts_off_card(model, n_cpu_moe, tp, ram(), warnings)
    batched, layout = _batch_and_layout(model, kv_cache_dtype, max_num_batched_tokens, warnings)
    # Price with the fewest sequences first: the length is chosen (or refused) against the pool
    # the final plan can actually have; more sequences are added only while the length still fits.
    seqs = max_num_seqs or 1
    memory = price_memory(model, utilization, batched, seqs)
    _check_weights_fit(model, utilization, memory, layout)
    model_max = model.max_model_len or FALLBACK_MODEL_LEN
    wanted = _wanted_len(model, workload, max_model_len, model_max, warnings)
    if kv_cache_memory is not None:
        memory = _with_kv_memory(memory, kv_cache_memory, warnings)
    chosen = choose_len(
        LengthAsk(model, workload, layout, max_model_len, model_max, wanted, force),
        memory.kv_pool,
        memory.kv_pool if kv_cache_memory is not None else memory.planned_pool,
        f"at --gpu-memory-utilization {utilization.fraction:.3f} the KV pool on {utilization.device}",
        warnings,
    )
    if max_num_seqs is None and kv_cache_memory is not None:  # the pool is fixed: count in it
        seqs = most_in_pool(layout, kv_cache_memory, chosen, batched)
    elif max_num_seqs is None:
        seqs = _most_sequences(model, utilization, layout, batched, chosen, memory)
        memory = price_memory(model, utilization, batched, seqs)
    elif model.is_hybrid and layout.max_concurrency(memory.kv_pool, chosen) < max_num_seqs:
        warnings.append(
            f"--max-num-seqs {max_num_seqs}: only {layout.max_concurrency(memory.kv_pool, chosen):.2f} full-length "
            "requests fit; each running sequence of this hybrid model holds its own linear-attention state."
        )
    if max_model_len is None and chosen < wanted:
        warnings.append(
            f"The {workload.name} workload wants {wanted:,} tokens per request; {chosen:,} fit in the KV pool."
        )
    plan = VllmPlan(
        model=model,
        model_ref=str(model.directory),
        served_model_name=model.repo_id,
        workload=workload,
        utilization=utilization,
        memory=memory,
        layout=layout,
        max_model_len=chosen,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        kv_cache_dtype=kv_cache_dtype,
        longest_fitting=layout.longest_fitting(memory.planned_pool, model_max),
        vllm_longest=layout.longest_fitting(memory.kv_pool, model_max),
        warnings=tuple(warnings),
        tensor_parallel=tp,
        kv_cache_memory_bytes=kv_cache_memory,
        experts_offload=offload,
    )
    return replace(plan, steps=tuple(describe(plan)))


def _experts_off_card(
    model: ModelConfig, asked: int, tp: CardSlice | None, ram: CpuMemory | None, warnings: list[str]
) -> tuple[ModelConfig, ExpertOffload]:
    """The model as the card holds it with the experts of the first ``asked`` layers in RAM."""
    if tp is not None:
        raise UsageError(
            "homelab prices vLLM's experts in system RAM on one card, not with tensor parallel "
            "(--cpu-offload-gb is per card, over each card's slice of the experts)",
            hint="Plan on one card (the GPU setting), or drop --n-cpu-moe / --cpu-moe.",
        )
    offload, notes = offload_experts(model, asked, ram)
    warnings += notes
    on_card = replace(model.weights, total=model.weights.total - offload.bytes)
    return replace(model, weights=on_card), offload


def _check_flags(max_model_len: int | None, max_num_seqs: int | None, batched: int) -> None:
    """Refuse the counts vLLM would refuse at start-up."""
    for flag, value in (
        ("--max-model-len", max_model_len),
        ("--max-num-seqs", max_num_seqs),
        ("--max-num-batched-tokens", batched),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise UsageError(f"{flag} must be a positive whole number, not {value!r}")
    if max_num_seqs is not None and batched < max_num_seqs:
        raise UsageError(
            f"--max-num-batched-tokens {batched} is below --max-num-seqs {max_num_seqs}; vLLM refuses that",
            hint=f"Use a batch of at least {max(max_num_seqs, 2048)} tokens, or fewer slots.",
        )


def _on_cards(
    model: ModelConfig, report: GpuReport, device_indices: tuple[int, ...] | None
) -> tuple[ModelConfig, Utilization, CardSlice | None, list[str]]:
    """The card (or equal cards, tensor parallel) the model is priced on: the model as one
    card holds it, the fraction of the card vLLM may take, the split, and the notes so far."""
    device_index = device_indices[0] if device_indices else None
    device = pick_device(report, device_index)
    if device is None:
        raise UsageError(
            f"vLLM needs an NVIDIA GPU, and {report.note or 'none is visible'}",
            hint="Plan for llama.cpp instead, which runs on the CPU too.",
        )
    budget = device_budget(report, device_index)
    warnings = list(model.notes) + list(budget.notes)
    if device_indices is None or len(device_indices) < 2:
        return model, utilization_for(device, budget), None, warnings
    sliced, tp = tensor_parallel(model, report, device_indices)
    warnings.append(
        f"Tensor parallel over {tp.size} equal cards: each holds 1/{tp.size} of the weights "
        f"({format_bytes(tp.weights_per_card)} of {format_bytes(model.weights.total)}) and "
        f"{tp.kv_heads_per_card} of {model.num_kv_heads} KV heads; priced per card at the "
        f"fraction the tightest card ({tp.utilization.device}) allows."
    )
    return sliced, tp.utilization, tp, warnings


def _batch_and_layout(
    model: ModelConfig, kv_cache_dtype: str, asked: int, warnings: list[str]
) -> tuple[int, KvLayout]:
    """``--max-num-batched-tokens`` and the KV layout at it: a hybrid model's batch is raised
    to its block, since with prefix caching vLLM refuses a smaller one."""
    layout = kv_layout(model, kv_cache_dtype, asked)
    if not model.is_hybrid or asked >= layout.block_size:
        return asked, layout
    batched = cdiv(layout.block_size, 256) * 256
    warnings.append(
        f"--max-num-batched-tokens raised from {asked:,} to {batched:,}: with prefix "
        f"caching vLLM refuses a batch smaller than this hybrid model's {layout.block_size}-token block."
    )
    return batched, kv_layout(model, kv_cache_dtype, batched)


def _wanted_len(
    model: ModelConfig,
    workload: Workload,
    asked: int | None,
    model_max: int,
    warnings: list[str],
) -> int:
    """The length the workload wants per request, capped at the model's (said when capped)."""
    if model.max_model_len is None:
        warnings.append(
            f"config.json names no context length; vLLM then assumes {FALLBACK_MODEL_LEN:,}."
        )
    if asked is None and workload.tokens_per_slot > model_max:
        warnings.append(
            f"{model.name} allows {model_max:,} tokens: each conversation is capped there, below the "
            f"{workload.tokens_per_slot:,} the {workload.name} workload wants."
        )
    return min(workload.tokens_per_slot, model_max)


def _with_kv_memory(memory: MemoryPrice, kv_cache_memory: int, warnings: list[str]) -> MemoryPrice:
    """The budget with the asked KV pool in place of the measured one (vLLM does not check it)."""
    if kv_cache_memory > memory.kv_pool:
        warnings.append(
            f"The KV cache memory asked for ({format_bytes(kv_cache_memory)}) is more than the "
            f"{format_bytes(max(memory.kv_pool, 0))} the card's budget leaves after the weights "
            "and scratch: vLLM does not check it and may run out of memory."
        )
    return replace(memory, requested=memory.before_kv + kv_cache_memory)


def _most_sequences(
    model: ModelConfig,
    util: Utilization,
    layout: KvLayout,
    batched: int,
    length: int,
    one: MemoryPrice,
) -> int:
    """Full-length requests that fit at once (at most MAX_SEQS), counting what more rows cost."""
    seqs = most_in_pool(layout, one.planned_pool, length, batched)
    while seqs > 1:
        pool = price_memory(model, util, batched, seqs).planned_pool
        if layout.fits(length, pool) and layout.max_concurrency(pool, length) >= seqs:
            return seqs
        seqs -= 1
    return 1


def _check_weights_fit(
    model: ModelConfig, util: Utilization, memory: MemoryPrice, layout: KvLayout
) -> None:
    if memory.kv_pool >= 2 * layout.bytes_per_block:
        return
    raise DoesNotFitError(
        f"{model.name} does not fit vLLM's budget on {util.device}: --gpu-memory-utilization "
        f"{util.fraction:.3f} buys {format_bytes(memory.requested)}, and the weights "
        f"({format_bytes(memory.weights)}), activation peak ({format_bytes(memory.activation.total)}), "
        f"memory outside torch ({format_bytes(memory.non_torch)}) and CUDA graphs "
        f"({format_bytes(memory.cuda_graphs)}) take {format_bytes(memory.before_kv)}, "
        f"leaving {format_bytes(memory.kv_pool)} for the KV cache",
        hint="Use a quantized checkpoint (AWQ, GPTQ, FP8) of this model, or llama.cpp with a GGUF "
        "(it can keep some layers in system RAM)."
        + (
            " For this MoE model, --n-cpu-moe N keeps the routed experts of the first N layers "
            "in system RAM (vLLM's --cpu-offload-gb with --cpu-offload-params experts)."
            if model.moe is not None
            else ""
        ),
    )
