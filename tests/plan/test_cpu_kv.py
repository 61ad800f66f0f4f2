"""A CPU plan's KV cache type and flash attention follow speed where the person set neither:
the fastest setting RAM allows, by this CPU's stored measurement or the documented finding,
said in the working; a cache type given is honoured; a card plan keeps q8_0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from metadata_headers import llama31_8b

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.engine.options import plan_options
from homelab.gguf.header import GgufModel
from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory, GpuReport, synthetic_report
from homelab.paths import state_dir
from homelab.plan.cpu_kv_speed import (
    F16_FA,
    F16_NO_FA,
    FILE_NAME,
    FINDING,
    Q8_FA,
    Speed,
    load_speeds,
    save_speeds,
)
from homelab.plan.pipeline import plan_model
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.plan.working import render_steps
from homelab.units import GiB
from tests.engine.planned_runs import cpu_plan, run_plan

MODEL = GgufModel((llama31_8b(),))
"""Llama 3.1 8B's geometry: q8_0 KV 69,632 B a token, f16 twice that."""
FREE = PlanRequest(kv_asked=False)
"""What a front-end asks when the person gave no cache type and no flash attention."""


def _ram(available: int) -> GpuReport:
    return GpuReport(
        source="cpu",
        devices=(),
        cpu=CpuMemory(total=available + 4 * GiB, available=available),
        note="no GPU",
    )


def _flags(plan: Plan) -> tuple[str, str, str]:
    argv = llama_server_argv(plan)
    return tuple(argv[argv.index(flag) + 1] for flag in ("-ctk", "-ctv", "-fa"))  # type: ignore[return-value]


def _kv_row(plan: Plan) -> str:
    rows = [line.strip() for line in render_steps(plan.steps) if line.strip().startswith("KV ")]
    return next(row for row in rows if ":" in row and "per token" not in row)


def _cost(setting: str) -> int:
    """Bytes of RAM one agent slot's plan takes at ``setting`` (weights, engine, KV, headroom)."""
    plan = make_plan(
        MODEL, "m", _ram(512 * GiB), PlanRequest(parallel=1, type_k=setting, type_v=setting)
    )
    engine, kv = plan.candidate.engine.total, plan.candidate.allocation.total
    return plan.budget.headroom + plan.weights_on_device + engine + kv


def test_cpu_plan_takes_f16_when_ram_allows_and_says_why() -> None:
    plan = make_plan(MODEL, "m", _ram(64 * GiB), FREE)
    assert _flags(plan) == ("f16", "f16", "on")
    assert plan.candidate.allocation.ctx_per_slot >= 100_000
    row = _kv_row(plan)
    assert row.startswith("KV f16 + FA on: 1.8× faster prefill than q8_0 + FA on (254 vs 142")
    assert "not measured on this machine" in row and "RAM allows it" in row
    assert "b11312" in row


def test_cpu_plan_keeps_q8_0_when_f16_does_not_fit_the_workload() -> None:
    q8, f16 = _cost("q8_0"), _cost("f16")
    assert q8 < f16
    plan = make_plan(MODEL, "m", _ram((q8 + f16) // 2), FREE)
    assert _flags(plan) == ("q8_0", "q8_0", "on")
    assert plan.candidate.allocation.ctx_per_slot >= 100_000
    row = _kv_row(plan)
    assert row.startswith("KV q8_0 + FA on: f16 + FA on would be faster (1.8× faster prefill")
    assert "does not fit in RAM with it" in row
    # with a little more RAM, f16 does: the boundary is the f16 plan's own cost
    assert _flags(make_plan(MODEL, "m", _ram(f16 + 1 * GiB), FREE))[0] == "f16"


def test_fewer_slots_at_f16_are_said() -> None:
    plan = make_plan(MODEL, "m", _ram(40 * GiB), FREE)
    assert _flags(plan)[0] == "f16"
    q8 = make_plan(MODEL, "m", _ram(40 * GiB), PlanRequest())
    assert q8.settings.n_seq > plan.settings.n_seq
    assert f"q8_0 would hold {q8.settings.n_seq} slower ones" in _kv_row(plan)


@pytest.mark.parametrize("given", ["q8_0", "q4_0"])
def test_a_cache_type_given_is_honoured_on_the_cpu(
    given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=64 * GiB, available=60 * GiB))
    options = plan_options(cache_type=given, cpu=True)
    request = options.request()
    assert request.kv_asked and request.type_k == given
    plan = plan_model(MODEL, "m", _ram(60 * GiB), options)
    assert _flags(plan) == (given, given, "on")
    assert plan.kv_choice == "" and not any(
        "faster prefill" in line for line in render_steps(plan.steps)
    )


def test_flash_attention_given_is_honoured_on_the_cpu() -> None:
    options = plan_options(flash_attn=True, cpu=True)
    plan = plan_model(MODEL, "m", _ram(60 * GiB), options)
    assert options.request().kv_asked and _flags(plan) == ("q8_0", "q8_0", "on")


def test_nothing_given_reaches_the_planner_as_free() -> None:
    request = plan_options(cpu=True).request()
    assert not request.kv_asked and (request.type_k, request.flash_attn) == ("q8_0", True)


def test_card_plan_is_unchanged() -> None:
    card = synthetic_report(24 * GiB)
    free, asked = make_plan(MODEL, "m", card, FREE), make_plan(MODEL, "m", card, PlanRequest())
    assert _flags(free) == ("q8_0", "q8_0", "on") and free.kv_choice == ""
    assert plan_to_dict(free, llama_server_argv(free)) == plan_to_dict(
        asked, llama_server_argv(asked)
    )


def _measured_here(q8: Speed, f16: Speed, f16_no_fa: Speed) -> Plan:
    """The CPU plan with nothing given, after a bench stored these speeds for this CPU."""
    speeds = {Q8_FA: q8, F16_FA: f16, F16_NO_FA: f16_no_fa}
    save_speeds(cpu.cpu_name(), "b11312-test", speeds, model="SmolLM2", prompt_tokens=2000)
    return plan_model(MODEL, "m", _ram(64 * GiB), plan_options(cpu=True))


def test_a_measurement_on_this_cpu_replaces_the_finding() -> None:
    """q8_0 measured fastest here: kept, and the row cites the bench, not the finding."""
    plan = _measured_here(Speed(300.0, 40.0), Speed(200.0, 38.0), Speed(150.0, 30.0))
    assert _flags(plan) == ("q8_0", "q8_0", "on")
    row = _kv_row(plan)
    assert "the fastest prefill of the settings compared" in row
    assert "measured on this CPU by bench/bench_cpu_kv.py (llama.cpp b11312-test" in row


def test_measured_fastest_without_flash_attention_is_served_so() -> None:
    plan = _measured_here(Speed(100.0, 40.0), Speed(150.0, 41.0), Speed(220.0, 42.0))
    assert _flags(plan) == ("f16", "f16", "off")
    assert (
        "KV f16 + FA off: 2.2× faster prefill than q8_0 + FA on (220 vs 100 prompt tokens/s; decode 42 vs 40"
        in _kv_row(plan)
    )


@pytest.mark.parametrize(
    "stored",
    [
        "{not json",
        json.dumps({"schema": 1, "records": [{"cpu": "x"}]}),
        json.dumps(
            {
                "schema": 1,
                "records": [
                    {
                        "cpu": "<this>",
                        "engine": "b1",
                        "model": "m",
                        "prompt_tokens": 1,
                        "recorded_at": "t",
                        "speeds": [{"cache_type": "f16", "flash_attn": True, "prefill": -5}],
                    }
                ],
            }
        ),
        json.dumps({"schema": 9, "records": []}),
    ],
    ids=["not-json", "missing-fields", "negative-speed", "other-schema"],
)
def test_a_corrupt_measurement_is_ignored_and_said(stored: str) -> None:
    path = state_dir() / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stored.replace("<this>", cpu.cpu_name()), "utf-8")
    plan = plan_model(MODEL, "m", _ram(64 * GiB), plan_options(cpu=True))
    assert _flags(plan) == ("f16", "f16", "on")  # the finding's choice
    assert "not measured on this machine" in _kv_row(plan)
    said = [w for w in plan.warnings if "No CPU KV speed measurement used" in w]
    assert said and "unreadable" in said[0] and "bench/bench_cpu_kv.py --store" in said[0]
    aside = list(path.parent.glob(f"{FILE_NAME}.corrupt-*"))
    assert aside and aside[0].read_text("utf-8") == stored.replace("<this>", cpu.cpu_name())


def test_a_measurement_of_another_cpu_is_not_this_ones(tmp_path: Path) -> None:
    save_speeds(
        "Some Other CPU × 64",
        "b1",
        {Q8_FA: Speed(500.0), F16_FA: Speed(100.0)},
        model="m",
        prompt_tokens=2000,
        where=tmp_path,
    )
    speeds = load_speeds(cpu.cpu_name(), where=tmp_path)
    assert speeds.speeds == FINDING.speeds and not speeds.measured_here
    assert "Some Other CPU × 64" in speeds.notes[0]
    # this CPU's record joins the other, and wins for this CPU
    save_speeds(
        cpu.cpu_name(),
        "b2",
        {Q8_FA: Speed(1.0), F16_FA: Speed(2.0)},
        model="m",
        prompt_tokens=2000,
        where=tmp_path,
    )
    mine = load_speeds(cpu.cpu_name(), where=tmp_path)
    assert mine.measured_here and mine.speeds[F16_FA] == Speed(2.0) and not mine.notes
    assert load_speeds("Some Other CPU × 64", where=tmp_path).speeds[Q8_FA] == Speed(500.0)


def test_the_real_engine_serves_the_chosen_setting(
    llama_server_bin: Path, smollm2_gguf: Path
) -> None:
    plan = cpu_plan(smollm2_gguf, ctx=4096, parallel=1, kv_asked=False)
    assert plan.kv_choice.startswith("KV f16 + FA on:")
    args, log = run_plan(llama_server_bin, plan)
    assert args[args.index("-ctk") + 1 :][:5] == ["f16", "-ctv", "f16", "-fa", "on"]
    assert log.kv_caches and {(k.type_k, k.type_v) for k in log.kv_caches} == {("f16", "f16")}
    assert log.context.flash_attn == "enabled"


def test_the_real_engine_serves_a_given_q4_0(llama_server_bin: Path, smollm2_gguf: Path) -> None:
    """Hostile to the choice: the person's q4_0 on the CPU reaches llama-server untouched."""
    plan = cpu_plan(smollm2_gguf, ctx=4096, parallel=1, type_k="q4_0", type_v="q4_0")
    assert plan.kv_choice == ""
    _, log = run_plan(llama_server_bin, plan)
    assert {(k.type_k, k.type_v) for k in log.kv_caches} == {("q4_0", "q4_0")}
