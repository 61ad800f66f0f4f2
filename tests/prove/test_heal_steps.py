"""The heal's steps and the calibration miss store, without an engine: the next smaller
plan (fewer slots, then less context), the store's merge and its broken-file handling, and
how the next plan uses a miss (only what the person left to the plan is narrowed).
Plans are real (the planner on generated GGUFs)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from homelab.engine.llamacpp.oom import (
    heal_line,
    is_oom,
    oom_line,
    prompt_cache_line,
)
from homelab.engine.options import plan_options
from homelab.engine.supervision.failure import EngineFailure
from homelab.errors import UsageError
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.calibration_key import model_identity
from homelab.plan.calibration_miss import (
    Setting,
    lookup_miss,
    miss_key,
    misses,
    record_miss,
    setting_of,
    store_path,
)
from homelab.plan.pipeline import plan_model
from homelab.serve.heal import MIN_CTX_PER_SLOT, smaller
from tests.factory import write_gguf

VERSION = "b11312-test"
RAM = GpuReport(
    source="cpu", devices=(), cpu=CpuMemory(total=16 << 30, available=16 << 30), note="16 GiB"
)


def test_fewer_slots_first_each_keeping_its_context_then_less_context() -> None:
    walk, setting = [], Setting(32, 32 * 8192, 0)
    while (nxt := smaller(setting)) is not None:
        walk.append(nxt)
        setting = Setting(nxt[0], nxt[1], 0)
    assert walk[:5] == [(16, 16 * 8192), (8, 8 * 8192), (4, 4 * 8192), (2, 2 * 8192), (1, 8192)]
    assert walk[5:] == [(1, 4096), (1, 2048), (1, 1024), (1, 512)]
    assert smaller(Setting(1, MIN_CTX_PER_SLOT, 0)) is None


def failed_allocation(lines: list[str]) -> tuple[str, int] | None:
    """(buffer type, bytes) of the first "failed to allocate X buffer of size N"; None."""
    for line in lines:
        if m := re.search(r"failed to allocate (\S+) buffer of size (\d+)", line):
            return m.group(1), int(m.group(2))
    return None


def test_out_of_memory_is_read_off_the_failure_or_its_lines() -> None:
    kv = "E alloc_tensor_range: failed to allocate CPU buffer of size 3208642560"
    assert oom_line(kv) and failed_allocation([kv]) == ("CPU", 3208642560)
    assert oom_line("terminate called after throwing an instance of 'std::bad_alloc'")
    assert oom_line("CUDA error: out of memory")
    assert not oom_line("llama_kv_cache:        CPU KV buffer size =  1530.00 MiB")
    crash = EngineFailure("KV cache did not fit", "…", None, kind="out_of_memory")
    assert is_oom(crash)
    other = EngineFailure("Port in use", "…", None, kind="bind_failed")
    assert not is_oom(other) and is_oom(other, [kv])


def test_a_failed_batch_heals_and_a_failed_prompt_cache_copy_does_not() -> None:
    # b11312's lines, as the real runs of test_heal_runtime and the prompt cache logged them
    batch = "0.05.719.811 E srv  update_slots: decode() failed: std::bad_alloc"
    cache = (
        "0.12.004.117 E srv         alloc: failed to allocate memory for prompt cache state: "
        "std::bad_alloc"
    )
    assert heal_line(batch) and not prompt_cache_line(batch)
    assert oom_line(cache) and prompt_cache_line(cache) and not heal_line(cache)
    crash = EngineFailure("Engine exited", "…", None, kind="exited")
    assert is_oom(crash, [batch]) and not is_oom(crash, [cache])


@pytest.fixture
def model(tmp_path):
    from homelab.gguf.model_file import read_model

    path = write_gguf("llama", tmp_path / "m.gguf", n_layer=4, n_ctx_train=8192)
    return read_model(str(path))


def test_a_miss_keeps_the_next_plan_at_the_setting_that_held(model) -> None:
    options = plan_options(engine_memory_limit=1 << 30)
    first = plan_model(model, "m", RAM, options, engine_version=VERSION)
    assert first.settings.n_seq == 32
    key = miss_key(first, model_identity(model), VERSION, options.engine.memory_limit)
    worked = Setting(8, 8 * first.candidate.allocation.ctx_per_slot, 1)
    record_miss(key, (setting_of(first),), worked, stage="load", said="failed to allocate")

    nxt = plan_model(model, "m", RAM, options, engine_version=VERSION)
    assert nxt.settings.n_seq == 8
    assert any("ran out of memory" in w and "8 slots" in w for w in nxt.warnings)
    # slots asked for are the person's: not overruled
    asked = plan_model(
        model,
        "m",
        RAM,
        replace(options, workload=replace(options.workload, slots=16)),
        engine_version=VERSION,
    )
    assert asked.settings.n_seq == 16
    # another engine build, another cap, another card: other keys
    assert plan_model(model, "m", RAM, options, engine_version="b1").settings.n_seq == 32
    assert plan_model(model, "m", RAM, plan_options(), engine_version=VERSION).settings.n_seq == 32
    # no engine version: estimates only, nothing consulted
    assert plan_model(model, "m", RAM, options).settings.n_seq == 32


def test_the_store_merges_failures_of_a_key_and_drops_one_that_then_held(model) -> None:
    plan = plan_model(model, "m", RAM, plan_options(), engine_version=VERSION)
    key = miss_key(plan, model_identity(model), VERSION, None)
    big, mid, small = Setting(32, 32 * 512, 300), Setting(16, 16 * 512, 200), Setting(8, 4096, 100)
    record_miss(key, (big,), None, stage="run", said="std::bad_alloc")
    record_miss(key, (mid,), small, stage="load", said="failed to allocate")
    (miss,) = misses()
    assert miss.failed == (mid, big) and miss.worked == small and miss.stage == "load"
    record_miss(key, (), mid, stage="proof", said="x")  # 16 slots held later: not a failure
    assert lookup_miss(key).failed == (big,)
    assert lookup_miss(key).worked == mid


def test_a_broken_store_is_moved_aside_and_read_as_empty(model) -> None:
    path = store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "misses": [{"key": "nope"}]}))
    assert misses() == []
    assert not path.exists()
    assert list(path.parent.glob("calibration_misses.json.corrupt-*"))
    plan = plan_model(model, "m", RAM, plan_options(), engine_version=VERSION)
    assert plan.settings.n_seq == 32


def test_the_memory_limit_setting_is_checked_by_name() -> None:
    with pytest.raises(UsageError, match="engine memory limit must be at least 64 MiB"):
        plan_options(engine_memory_limit=1 << 20)
    with pytest.raises(UsageError, match="engine memory limit"):
        plan_options(engine_memory_limit=True)  # type: ignore[arg-type]
    assert plan_options(engine_memory_limit=64 << 20).engine.memory_limit == 64 << 20
