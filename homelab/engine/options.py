"""The one builder of :class:`~homelab.plan.options.PlanOptions`, for every front-end.

The CLI (its flags) and the TUI (its plan panel) collect plain values and call
:func:`plan_options`; the engine kind named supplies what depends on it (its default cache
type, whether it takes RPC workers), so the plan layer never interprets an engine name.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from homelab.engine.kinds import DEFAULT_ENGINE, engine_kind
from homelab.errors import UsageError
from homelab.plan.options import (
    CardOptions,
    EngineOptions,
    PlanOptions,
    ServeOptions,
    WorkloadOptions,
)
from homelab.plan.placement import EVERY_BLOCK
from homelab.plan.workload import Workload, parse_workload


def plan_options(
    *,
    engine: str = DEFAULT_ENGINE,
    workload: Workload | str | None = None,
    ctx: int | None = None,
    slots: int | None = None,
    cache_type: str | None = None,
    cache_type_k: str | None = None,
    cache_type_v: str | None = None,
    ubatch: int = 512,
    unified: bool = False,
    flash_attn: bool | None = None,
    gpu: int | tuple[int, ...] | None = None,
    vram: int | None = None,
    gpu_snapshot: Path | None = None,
    sample_seconds: float = 2.0,
    rpc: Iterable[str] = (),
    cpu: bool = False,
    n_cpu_moe: int | None = None,
    cpu_moe: bool = False,
    port: int | None = None,
    engine_memory_limit: int | None = None,
    cache_ram: int | None = None,
    kv_cache_memory: int | None = None,
    prove: bool | None = None,
    force: bool = False,
) -> PlanOptions:
    """The options these values describe, each checked once.

    ``workload`` is a :class:`~homelab.plan.workload.Workload` or its text ("agent",
    "chat", "32k"); ``cache_type`` sets K and V where ``cache_type_k``/``cache_type_v``
    do not; ``None`` leaves a setting to the plan (or the preset, or the engine).
    ``n_cpu_moe`` keeps the routed experts of that many leading blocks in system RAM;
    ``cpu_moe`` keeps every block's there.

    Raises:
        UsageError: a value out of range, an engine homelab does not run, RPC workers
            for an engine that cannot use them, or both experts-in-RAM settings.
    """
    per_slot = (
        (parse_workload(workload) if workload else None) if isinstance(workload, str) else workload
    )
    shape = WorkloadOptions(
        per_slot=per_slot,
        ctx=ctx,
        slots=slots,
        cache_type_k=cache_type_k or cache_type,
        cache_type_v=cache_type_v or cache_type,
        ubatch=ubatch,
        unified=unified,
    )
    if cpu_moe and n_cpu_moe is not None:
        raise UsageError(
            "Give either the experts of every block in RAM or of the first N, not both.",
            hint="--cpu-moe is --n-cpu-moe with every block.",
        )
    experts = EVERY_BLOCK if cpu_moe else n_cpu_moe
    card = CardOptions(gpu, vram, gpu_snapshot, sample_seconds, tuple(rpc), cpu, experts)
    kind = engine_kind(engine)
    engine_options = EngineOptions(
        name=kind.name,
        cache_type=kind.default_cache_type,
        port=port,
        memory_limit=engine_memory_limit,
        cache_ram=cache_ram,
        flash_attn=flash_attn,
        kv_cache_memory=kv_cache_memory,
    )
    if card.rpc and not kind.takes_rpc_workers:
        from homelab.plan.rpc_endpoints import SETTING

        raise UsageError(
            f"RPC workers are llama.cpp's (rpc-server); the {engine} engine cannot use them",
            hint=f"drop {SETTING}, or serve with the llama.cpp engine (vLLM spans machines with Ray)",
        )
    if card.n_cpu_moe and not kind.keeps_experts_in_ram:
        raise UsageError(
            f"the {engine} engine cannot keep a model's experts in system RAM apart from the rest",
            hint="drop --n-cpu-moe / --cpu-moe, or serve with the llama.cpp engine",
        )
    return PlanOptions(engine_options, card, shape, ServeOptions(prove, force))
