"""``--cache-ram``: llama-server's host-RAM prompt cache, sized to fit an engine memory limit.

llama-server b11312 keeps copies of finished slots' KV state in a host-RAM prompt cache of
at most ``--cache-ram N`` MiB (default 8192; ``-1`` no limit, ``0`` off; common/arg.cpp,
tools/server/server-task.cpp ``server_prompt_cache::alloc``). It evicts old entries to stay
under N and skips an entry larger than N, but under an address-space cap
(``engine_memory_limit``, RLIMIT_AS) an 8 GiB default is more than the cap leaves: the
copy's ``std::bad_alloc`` is caught ("failed to allocate memory for prompt cache state"),
the cache shrinks and the engine serves on. So with a limit, the plan passes a size the
limit leaves room for: half of what is left of the limit after the plan's load in the
engine's address space (:func:`host_load`) and the engine's own address space beyond its
buffers, or 0 (off) when that is too little to be worth a cache. Without a limit llama-server's default stands.
A size the person set (``EngineOptions.cache_ram``) is passed as it is, and said so.
"""

from __future__ import annotations

from dataclasses import replace

from homelab.plan.calibration_miss import predicted_bytes
from homelab.plan.options import PlanOptions
from homelab.plan.planner import Plan
from homelab.plan.working import Step
from homelab.units import MiB

ADDRESS_OVERHEAD = 512 * MiB
"""The engine's address space beyond its buffers: its libraries, thread stacks and malloc
arenas (b11312 CPU build, SmolLM2: 190 MiB with one arena, up to ~600 MiB with glibc's
per-thread arenas, measured with /proc/PID/status VmSize at ready)."""
MIN_CACHE_MIB = 64
"""Less room than this is no cache worth having: off."""


def host_load(plan: Plan) -> int:
    """The plan's load in the engine's address space: the whole model file (mapped, whatever
    is offloaded) and, on a CPU plan, its engine state and KV as well."""
    if plan.on_gpu:
        return plan.weights.total
    return plan.weights.total + predicted_bytes(plan) - plan.weights_on_device


def cache_ram_mib(plan: Plan, memory_limit: int | None) -> int | None:
    """``--cache-ram``'s MiB for ``plan`` under ``memory_limit``; None: no limit (the default)."""
    if memory_limit is None:
        return None
    left = memory_limit - host_load(plan) - ADDRESS_OVERHEAD
    mib = left // 2 // MiB
    return mib if mib >= MIN_CACHE_MIB else 0


def sized_cache_ram(plan: Plan, options: PlanOptions) -> tuple[Plan, int | None]:
    """``plan`` with the working of its ``--cache-ram``, and that MiB (None: not passed, the
    engine's default): the person's setting when given, else sized under the limit."""
    asked, limit = options.engine.cache_ram, options.engine.memory_limit
    if asked is not None:
        mib = asked // MiB
        said = f"{mib:,} MiB" if mib else "off"
        step = Step("prompt cache (--cache-ram), as set", said, mib * MiB)
    else:
        sized = cache_ram_mib(plan, limit)
        if sized is None or limit is None:
            return plan, None
        mib, load = sized, host_load(plan)
        left = limit - load - ADDRESS_OVERHEAD
        said = f"{mib:,} MiB" if mib else f"off (under {MIN_CACHE_MIB} MiB)"
        step = Step(
            "prompt cache (--cache-ram) under the engine memory limit",
            f"(limit {limit // MiB:,} MiB − load {load // MiB:,} MiB − engine address space "
            f"{ADDRESS_OVERHEAD // MiB:,} MiB) / 2 = {max(left, 0) // 2 // MiB:,} MiB → {said}",
            mib * MiB,
        )
    return replace(plan, steps=(*plan.steps, step)), mib
