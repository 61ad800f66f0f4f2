"""The vLLM plan without an NVIDIA card (vLLM's CPU backend), an explicit KV pool on either
backend, ``tokens_fit`` in ``--json``, and the facts a served vLLM hands the gate."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from vllm_fixture_data import LOGS

from homelab.cli import main
from homelab.engine.kinds import engine_kind, logged_kv_tokens
from homelab.engine.options import plan_options
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.vllm.argv import vllm_argv
from homelab.errors import DoesNotFitError, UsageError
from homelab.gpu.report import CpuMemory, GpuReport, synthetic_report
from homelab.plan.options import PlanOptions
from homelab.plan.vllm.cpu import CPU_RUNTIME_BYTES
from homelab.plan.vllm.plan import plan_vllm
from homelab.units import GiB, MiB

NO_GPU = GpuReport(
    source="cpu", devices=(), cpu=CpuMemory(total=24 * GiB, available=20 * GiB), note="no GPU"
)
CPU_OK = LOGS / "vllm-0.32.0_captured-cpu_tiny-llama_startup-ok.log"


def _vllm(**kw) -> PlanOptions:
    return plan_options(engine="vllm", **kw)


def test_without_a_card_the_plan_is_for_the_cpu_backend_with_its_pool_passed(model_dir) -> None:
    plan = plan_vllm(model_dir("homelab__tiny-llama"), NO_GPU, _vllm(ctx=4096, slots=2))
    assert (
        plan.backend == "cpu" and plan.utilization is None and plan.gpu_memory_utilization is None
    )
    kv = plan.layout
    assert kv.block_size == 128
    # the pool is what two full-length requests need, plus the block vLLM keeps back
    assert plan.kv_cache_memory_bytes == 2 * kv.request_bytes(4096) + kv.bytes_per_block
    assert plan.layout.fits(4096, plan.kv_pool)
    argv = vllm_argv(plan, executable="/venv/bin/python")
    assert argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        plan.model_ref,
    ]
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(plan.kv_pool)
    assert "--gpu-memory-utilization" not in argv


def test_the_ram_budget_caps_the_pool(model_dir) -> None:
    folder = model_dir("Qwen__Qwen3-8B")  # 16.4 GB of weights in 22 GiB available
    ram = replace(NO_GPU, cpu=CpuMemory(total=32 * GiB, available=22 * GiB))
    plan = plan_vllm(folder, ram, _vllm(workload=None))
    room = 22 * GiB - 2 * GiB - plan.model.weights.total - CPU_RUNTIME_BYTES
    assert 0 < plan.kv_pool <= room
    assert plan.max_model_len < 40_960 and any("fit in the KV pool" in w for w in plan.warnings)


def test_a_large_model_without_room_does_not_fit(model_dir) -> None:
    with pytest.raises(DoesNotFitError, match="no RAM"):
        plan_vllm(model_dir("mistralai__Mistral-Small-24B-Instruct-2501"), NO_GPU, _vllm())


def test_an_explicit_kv_pool_on_a_gpu_is_passed_and_priced_exactly(model_dir) -> None:
    folder = model_dir("Qwen__Qwen3-8B")
    card = synthetic_report(48 * GiB)
    plan = plan_vllm(folder, card, _vllm(ctx=8192, kv_cache_memory=4 * GiB))
    assert plan.backend == "cuda" and plan.kv_pool == 4 * GiB
    argv = vllm_argv(plan)
    assert argv[argv.index("--kv-cache-memory-bytes") + 1] == str(4 * GiB)
    assert "--gpu-memory-utilization" not in argv
    too_long = plan.layout.longest_fitting(4 * GiB, 40_960) + 1
    with pytest.raises(DoesNotFitError, match="estimated maximum model length is"):
        plan_vllm(folder, card, _vllm(ctx=too_long, kv_cache_memory=4 * GiB))


def test_plan_json_carries_tokens_fit_for_both_backends(model_dir, capsys) -> None:
    gpu = str(LOGS.parents[1] / "gpu" / "rtx3090_wayland.json")
    folder = model_dir("homelab__tiny-llama")
    for extra in (["--gpu-snapshot", gpu], ["--kv-cache-memory", "64MiB", "--ctx", "4096"]):
        code = main(["plan", str(folder), "--engine", "vllm", "--json", *extra])
        out, err = capsys.readouterr()
        data = json.loads(out)
        assert code == 0, err
        assert data["tokens_fit"] > 0 and isinstance(data["tokens_fit"], int)
        if "--kv-cache-memory" in extra:  # this machine has no NVIDIA driver: the CPU backend
            assert data["backend"] == "cpu" and data["kv_pool"] == 64 * MiB


def test_a_bad_kv_cache_memory_is_a_usage_error(model_dir, capsys) -> None:
    code = main(
        [
            "plan",
            str(model_dir("homelab__tiny-llama")),
            "--engine",
            "vllm",
            "--kv-cache-memory",
            "lots",
        ]
    )
    assert code == 2 and "not a size" in capsys.readouterr().err
    with pytest.raises(UsageError):
        plan_options(engine="vllm", kv_cache_memory=0)


def test_the_gate_gets_vllms_logged_pool_not_the_plans_guess() -> None:
    lines = CPU_OK.read_text().splitlines()
    guess = PlanFacts(
        slots=2,
        ctx_total=4096,
        ctx_per_slot=4096,
        kv_tokens=1,
        unified=True,
        cache_type_k="auto",
        cache_type_v="auto",
    )
    served = engine_kind("vllm").served_facts(guess, lines)
    assert served == replace(guess, kv_tokens=16_384)
    assert engine_kind("vllm").served_facts(guess, ["no capacity line"]) == guess
    assert logged_kv_tokens(engine_kind("vllm"), str(CPU_OK)) == 16_384
    assert logged_kv_tokens(engine_kind("vllm"), None) is None


def test_a_legacy_kv_space_setting_is_refused_before_it_overrides_the_pool(
    model_dir, monkeypatch
) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    with pytest.raises(UsageError, match="VLLM_CPU_KVCACHE_SPACE"):
        engine_kind("vllm").plan(str(model_dir("homelab__tiny-llama")), NO_GPU, _vllm(ctx=4096))
