"""``--cache-ram`` under an engine memory limit: the plan sizes llama-server's host-RAM
prompt cache to what the limit leaves after the plan's load (or turns it off), says so in
its working, and passes it on the command line; without a limit the engine's default stands.
Real plans of SmolLM2 on a fixed 16 GiB of RAM."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.kinds import engine_kind
from homelab.engine.options import plan_options
from homelab.errors import UsageError
from homelab.plan.cache_ram import (
    ADDRESS_OVERHEAD,
    MIN_CACHE_MIB,
    cache_ram_mib,
    host_load,
)
from homelab.plan.calibration_miss import predicted_bytes
from homelab.plan.working import render_steps
from tests.prove.lazy_memory import RAM


def _argv(model: Path, limit: int | None) -> tuple[object, list[str]]:
    kind = engine_kind("llama.cpp")
    plan = kind.plan(str(model), RAM, plan_options(slots=2, ctx=2048, engine_memory_limit=limit))
    return plan, kind.argv(plan, 8080, "llama-server")


def test_a_limit_sizes_the_prompt_cache_to_what_it_leaves(smollm2_gguf: Path) -> None:
    plan, argv = _argv(smollm2_gguf, 4 << 30)
    load = host_load(plan.plan)
    assert load == predicted_bytes(plan.plan)  # a CPU plan: all of it in the address space
    want = (4 << 30) - load - ADDRESS_OVERHEAD
    assert argv[argv.index("--cache-ram") + 1] == str(want // 2 >> 20)
    assert plan.cache_ram_mib == want // 2 >> 20 > MIN_CACHE_MIB
    working = "\n".join(render_steps(plan.plan.steps))
    assert "prompt cache (--cache-ram) under the engine memory limit: (limit 4,096 MiB" in working


def test_a_tight_limit_turns_the_prompt_cache_off_and_no_limit_leaves_the_default(
    smollm2_gguf: Path,
) -> None:
    plan, argv = _argv(smollm2_gguf, 600 << 20)
    assert argv[argv.index("--cache-ram") + 1] == "0" and plan.cache_ram_mib == 0
    assert cache_ram_mib(plan.plan, 600 << 20) == 0
    assert "→ off (under 64 MiB)" in "\n".join(render_steps(plan.plan.steps))
    plan, argv = _argv(smollm2_gguf, None)
    assert "--cache-ram" not in argv and plan.cache_ram_mib is None


def test_a_prompt_cache_set_by_the_person_is_passed_as_set_under_a_limit_or_not(
    smollm2_gguf: Path,
) -> None:
    kind = engine_kind("llama.cpp")
    for limit in (4 << 30, None):
        options = plan_options(slots=2, ctx=2048, engine_memory_limit=limit, cache_ram=3 << 30)
        plan = kind.plan(str(smollm2_gguf), RAM, options)
        argv = kind.argv(plan, 8080, "llama-server")
        assert argv[argv.index("--cache-ram") + 1] == "3072" and plan.cache_ram_mib == 3072
        working = "\n".join(render_steps(plan.plan.steps))
        assert "prompt cache (--cache-ram), as set: 3,072 MiB" in working
        assert "under the engine memory limit" not in working
    off = kind.plan(str(smollm2_gguf), RAM, plan_options(slots=2, ctx=2048, cache_ram=0))
    argv = kind.argv(off, 8080, "llama-server")
    assert argv[argv.index("--cache-ram") + 1] == "0" and off.cache_ram_mib == 0


def test_plan_takes_cache_ram_as_a_size_and_refuses_what_is_not_one(smollm2_gguf: Path) -> None:
    from tests.engine.supervisor_child import run_homelab

    planned = run_homelab("plan", str(smollm2_gguf), "--vram", "16GiB", "--cache-ram", "512MiB")
    assert planned.returncode == 0, planned.stderr
    assert "--cache-ram 512" in planned.stdout
    refused = run_homelab("plan", str(smollm2_gguf), "--vram", "16GiB", "--cache-ram", "lots")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--cache-ram" in refused.stderr and "not a size" in refused.stderr
    with pytest.raises(UsageError, match="prompt cache size must be zero"):
        plan_options(cache_ram=-1).check()
