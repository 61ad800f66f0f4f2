"""The planner on synthetic cards and RAM: budget arithmetic, slots, partial offload, errors."""

from __future__ import annotations

import dataclasses
import re

import pytest
from metadata_headers import llama31_8b, seed_qwen35

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.errors import DoesNotFitError
from homelab.gguf.header import GgufModel, TensorInfo
from homelab.gpu.report import CpuMemory, GpuReport, synthetic_report
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.plan.working import render_steps
from homelab.plan.workload import CHAT, parse_workload
from homelab.units import GiB, MiB


def _with_weights(
    header, *, block_bytes: int, embd_bytes: int, output_bytes: int, tied: bool = False
) -> GgufModel:
    n = header.metadata[f"{header.arch}.block_count"]
    tensors = [TensorInfo("token_embd.weight", (1,), 0, "F32", 0, embd_bytes)]
    tensors += [
        TensorInfo(f"blk.{i}.ffn_up.weight", (1,), 0, "F32", 0, block_bytes) for i in range(n)
    ]
    if not tied:
        tensors.append(TensorInfo("output.weight", (1,), 0, "F32", 0, output_bytes))
    tensors.append(TensorInfo("output_norm.weight", (1,), 0, "F32", 0, 4096))
    return GgufModel((dataclasses.replace(header, tensors=tuple(tensors)),))


def seed_model() -> GgufModel:
    # ~5.4 GiB on the card: 32 blocks of 160 MiB + a 400 MiB output head; 600 MiB embedding in RAM
    return _with_weights(
        seed_qwen35(), block_bytes=160 * MiB, embd_bytes=600 * MiB, output_bytes=400 * MiB
    )


def _check_budget_adds_up(plan) -> None:
    b = plan.budget
    engine = plan.candidate.engine.total
    kv = plan.candidate.allocation.total
    assert b.usable == b.total - b.reserved - b.desktop - b.other - b.headroom
    assert plan.weights_on_device + engine + kv <= b.usable


def test_seed_model_on_16_gib_card_plans_agents() -> None:
    plan = make_plan(seed_model(), "seed.gguf", synthetic_report(16 * GiB), PlanRequest())
    assert plan.verdict == "fits"
    assert plan.weights_on_device == 32 * 160 * MiB + 400 * MiB + 4096
    alloc = plan.candidate.allocation
    assert alloc.bytes_per_token == 17_408
    assert alloc.ctx_per_slot == 100_096
    # slots is the most that fit: one more slot must not fit
    n = plan.settings.n_seq
    assert n >= 1
    _check_budget_adds_up(plan)
    bigger = PlanRequest(parallel=n + 1, ctx=(n + 1) * 100_096)
    with pytest.raises(DoesNotFitError):
        make_plan(seed_model(), "seed.gguf", synthetic_report(16 * GiB), bigger)
    # the CUDA flash-attention copy of the widest layer is priced per token: 2 B × (1024 + 1024)
    assert plan.candidate.engine.fa_scratch == 4096 * alloc.ctx_per_seq * alloc.n_stream
    text = "\n".join(render_steps(plan.steps))
    assert "2 × 8 layers × 4 kv heads × 256 × 34/32 B = 17,408 B" in text
    assert "= 17,408 B per token of context" in text


def test_tokens_fit_is_the_boundary() -> None:
    plan = make_plan(seed_model(), "seed.gguf", synthetic_report(16 * GiB), PlanRequest(parallel=1))
    from homelab.plan.fit import Fitter

    fitter = Fitter(
        plan.geometry, plan.budget.usable - plan.weights_on_device, plan.settings, on_gpu=True
    )
    assert fitter.fits(plan.tokens_fit, 1)
    assert not fitter.fits(plan.tokens_fit + 256, 1)


def test_json_contract_and_argv() -> None:
    plan = make_plan(seed_model(), "/models/seed.gguf", synthetic_report(16 * GiB), PlanRequest())
    argv = llama_server_argv(plan, port=8123)
    data = plan_to_dict(plan, argv)
    for key in (
        "model",
        "weights_bytes",
        "cache_type_k",
        "cache_type_v",
        "kv_bytes_per_token",
        "ctx_size",
        "parallel",
        "ctx_per_slot",
        "kv_bytes",
        "tokens_fit",
        "budget",
        "steps",
        "argv",
    ):
        assert key in data
    assert set(data["model"]) >= {"path", "arch", "n_layer", "kv_layers", "trained_ctx"}
    assert set(data["budget"]) >= {
        "total",
        "reserved",
        "desktop",
        "other",
        "engine",
        "headroom",
        "weights",
        "kv",
    }
    assert data["model"]["kv_layers"] == 8
    assert argv[argv.index("-c") + 1] == str(data["ctx_size"])
    assert argv[argv.index("-np") + 1] == str(data["parallel"])
    assert argv[argv.index("-ctk") + 1] == "q8_0" and argv[argv.index("-ctv") + 1] == "q8_0"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "--metrics" in argv and argv[argv.index("-lv") + 1] == "4"
    assert argv[argv.index("--fit-target") + 1] == str(plan.budget.headroom // MiB)
    assert "-kvu" not in argv
    # a synthetic card (--vram) is no card in particular: nothing to pin (a probed one is pinned)
    assert "--device" not in argv and "--tensor-split" not in argv
    assert [d["llama_device"] for d in data["devices"]] == ["CUDA0"]
    assert {k: data["devices"][0][k] for k in data["budget"]} == data["budget"]


def test_weights_too_big_offers_partial_offload() -> None:
    model = _with_weights(
        llama31_8b(), block_bytes=400 * MiB, embd_bytes=500 * MiB, output_bytes=500 * MiB
    )
    plan = make_plan(model, "big.gguf", synthetic_report(8 * GiB), PlanRequest(workload=CHAT))
    assert plan.verdict == "partial"
    assert plan.n_gpu_layers is not None and 1 < plan.n_gpu_layers < 33
    gpu_blocks = plan.n_gpu_layers - 1
    assert plan.weights_on_device == 500 * MiB + 4096 + gpu_blocks * 400 * MiB
    assert any("several times slower" in w for w in plan.warnings)
    argv = llama_server_argv(plan)
    assert argv[argv.index("-ngl") + 1] == str(plan.n_gpu_layers)
    # what went to the GPU fits there; all of it would not
    assert plan.weights_on_device + plan.candidate.cost <= plan.budget.usable
    assert plan.weights.on_device() > plan.budget.usable


def test_ctx_that_does_not_fit_says_what_does() -> None:
    with pytest.raises(DoesNotFitError) as caught:
        make_plan(seed_model(), "seed.gguf", synthetic_report(16 * GiB), PlanRequest(ctx=4_000_000))
    hint = caught.value.hint or ""
    assert "a context of" in hint and "--" not in hint  # names the setting, not a flag
    offered = int(re.search(r"a context of ([\d,]+) tokens", hint).group(1).replace(",", ""))
    plan = make_plan(
        seed_model(), "seed.gguf", synthetic_report(16 * GiB), PlanRequest(ctx=offered)
    )
    assert plan.candidate.allocation.n_ctx == offered  # what the hint offers does fit


def test_model_trained_shorter_than_workload_is_capped() -> None:
    header = dataclasses.replace(llama31_8b())
    header.metadata["llama.context_length"] = 32_768
    model = _with_weights(
        header, block_bytes=100 * MiB, embd_bytes=100 * MiB, output_bytes=100 * MiB
    )
    plan = make_plan(model, "m.gguf", synthetic_report(24 * GiB), PlanRequest())
    assert plan.candidate.allocation.ctx_per_slot == 32_768
    assert any("trained on 32,768" in w for w in plan.warnings)


def test_cpu_plan_uses_ram() -> None:
    report = GpuReport(
        source="cpu", devices=(), cpu=CpuMemory(total=32 * GiB, available=24 * GiB), note="no GPU"
    )
    plan = make_plan(seed_model(), "seed.gguf", report, PlanRequest())
    assert plan.budget.kind == "cpu"
    assert plan.weights_on_device == plan.weights.total
    assert plan.candidate.engine.cuda_context == 0 and plan.candidate.engine.fa_scratch == 0
    assert llama_server_argv(plan)[llama_server_argv(plan).index("-ngl") + 1] == "0"
    assert "--device" not in llama_server_argv(plan)  # nothing to pin on the CPU
    _check_budget_adds_up(plan)


def test_workload_parsing() -> None:
    assert parse_workload("agent").tokens_per_slot == 100_000
    assert parse_workload("32k").tokens_per_slot == 32_000
    assert parse_workload("4096").tokens_per_slot == 4096


def test_mla_refuses_mixed_cache_types() -> None:
    from metadata_headers import deepseek_v3

    from homelab.errors import UsageError

    model = _with_weights(
        deepseek_v3(), block_bytes=10 * MiB, embd_bytes=10 * MiB, output_bytes=10 * MiB
    )
    with pytest.raises(UsageError, match="MLA"):
        make_plan(
            model, "ds.gguf", synthetic_report(24 * GiB), PlanRequest(type_k="f16", type_v="q4_0")
        )
    plan = make_plan(
        model, "ds.gguf", synthetic_report(24 * GiB), PlanRequest(type_k="q4_0", type_v="q4_0")
    )
    assert plan.candidate.allocation.full_v == 0
