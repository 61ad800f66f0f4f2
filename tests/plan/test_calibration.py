"""homelab.plan.calibration: a real run's measured buffers feed the next plan.

Plan (through the CLI's own ``prepared_from_args``) → run the plan's argv in the real
llama-server → record → the next plan for the same model, engine and flags prices the
measured compute buffer and says "measured"; other flags or another engine do not.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest

from homelab.cli import build_parser, main
from homelab.cli.plan_cmd import prepared_from_args
from homelab.engine.llamacpp.actuals import compare, row
from homelab.engine.llamacpp.calibrate import record
from homelab.engine.llamacpp.locate import engine_version
from homelab.engine.llamacpp.log import parse_load_log
from homelab.engine.options import plan_options
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import synthetic_report
from homelab.plan.calibration import (
    Calibration,
    CalibrationError,
    records,
    save,
    store_path,
)
from homelab.plan.calibration_key import key_for, model_identity
from homelab.plan.pipeline import plan_model
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.working import render_steps
from homelab.units import MiB
from tests.engine.planned_runs import cpu_plan, engine_args, run_plan
from tests.factory import write_gguf
from tests.factory.server_log import capture_load_log

pytestmark = pytest.mark.engine

NO_GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "no_gpu.json"
LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "llama_logs"


def plan_from_args(args):
    """(the llama.cpp plan, its argv) as ``homelab plan`` prepares them."""
    prepared = prepared_from_args(args)
    return prepared.plan.plan, list(prepared.argv)


def _args(model: Path, *options: str):
    """The parsed ``homelab plan`` command line (system RAM: the replayed driver-less machine)."""
    argv = ["plan", str(model), "--gpu-snapshot", str(NO_GPU), "--sample-seconds", "0", *options]
    return build_parser().parse_args(argv)


def _compute_step(plan) -> str:
    return next(
        step for step in render_steps(plan.steps) if step.startswith("Engine: compute buffer")
    )


def test_real_run_calibrates_the_next_plan(
    smollm2_gguf: Path, llama_server_bin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _args(smollm2_gguf, "--ctx", "4096", "--parallel", "2")
    first, argv = plan_from_args(args)
    assert "estimated" in _compute_step(first) and first.candidate.engine.measured_compute is None

    log = parse_load_log(capture_load_log(llama_server_bin, smollm2_gguf, engine_args(argv)))
    assert log.ready, log.failures
    version = engine_version(llama_server_bin)
    assert version and version.startswith("b")
    calibration = record(first, log, version)
    logged_compute = row(compare(first, log), "compute").actual
    assert calibration.compute == logged_compute
    assert calibration.predicted_compute == first.candidate.engine.compute_buffer
    assert calibration.kv == row(compare(first, log), "KV").actual
    assert calibration.model is not None and calibration.output is not None
    assert calibration.recurrent is None  # SmolLM2 keeps no recurrent state: unknown, not 0

    second, second_argv = plan_from_args(args)
    assert "measured" in _compute_step(second)
    assert second.candidate.engine.measured_compute == calibration.measured_compute
    assert second.candidate.measured_here  # its own flags' measurement, not a neighbour's
    assert second.candidate.engine.compute_buffer == logged_compute
    assert second_argv == argv  # same flags: the measurement is of exactly this command line
    key = key_for(second, read_model(smollm2_gguf), version)
    assert [c for c in records() if c.key == key][-1:] == [calibration]

    assert (
        main(
            [
                "plan",
                str(smollm2_gguf),
                "--gpu-snapshot",
                str(NO_GPU),
                "--sample-seconds",
                "0",
                "--ctx",
                "4096",
                "--parallel",
                "2",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["engine"]["compute_measured"] is True
    assert data["engine"]["compute_buffer"] == logged_compute

    # other compute-relevant flags were never measured: back to the estimate
    other, _ = plan_from_args(
        _args(smollm2_gguf, "--ctx", "4096", "--parallel", "2", "--ubatch", "256")
    )
    assert "estimated" in _compute_step(other)
    # the same flags under another engine build: not this build's measurement
    model = read_model(smollm2_gguf)
    options = plan_options(ctx=4096, slots=2)
    again = plan_model(
        model, str(smollm2_gguf), probe(snapshot=NO_GPU), options, engine_version="b1-0000000"
    )
    assert again.candidate.engine == first.candidate.engine  # the estimate, as before recording
    assert again.settings == first.settings and again.candidate.engine.measured_compute is None


def test_record_replaces_the_same_key_atomically(
    smollm2_gguf: Path, llama_server_bin: Path
) -> None:
    plan = cpu_plan(smollm2_gguf, ctx=4096, parallel=1)
    _, log = run_plan(llama_server_bin, plan)
    version = engine_version(llama_server_bin)
    first = record(plan, log, version)
    second = record(plan, log, version)
    assert records() == [second] and first.key == second.key
    data = json.loads(store_path().read_text("utf-8"))
    assert data["schema"] == 1 and len(data["records"]) == 1
    assert data["records"][0]["key"]["model"]["name"] == smollm2_gguf.name
    assert data["records"][0]["key"]["ctx"] == 4096
    leftovers = [
        p.name for p in store_path().parent.iterdir() if p.name.startswith(".calibration.json.")
    ]
    assert leftovers in ([], [".calibration.json.lock"])  # no half-written temporary file

    smaller = cpu_plan(smollm2_gguf, ctx=4096, parallel=1, ubatch=256)
    _, smaller_log = run_plan(llama_server_bin, smaller)
    other = record(smaller, smaller_log, version)
    assert [c.key for c in records()] == [second.key, other.key]
    assert other.compute != second.compute  # half the micro-batch, a smaller graph


def test_a_log_of_other_flags_or_without_figures_is_refused(smollm2_gguf: Path) -> None:
    real = parse_load_log(
        (LOGS / "llama__c4096_np1_ctk-q8_0_ctv-q8_0_fa-on_norepack.log").read_text("utf-8")
    )
    other_flags = cpu_plan(smollm2_gguf, ctx=8192, parallel=2)
    with pytest.raises(CalibrationError, match="n_ctx 4096"):
        record(other_flags, real, "b11312-0c1e57098")
    failed = parse_load_log((LOGS / "fail-missing-file__c4096.log").read_text("utf-8"))
    with pytest.raises(CalibrationError, match="no compute buffer"):
        record(cpu_plan(smollm2_gguf, ctx=4096, parallel=1), failed, "b11312-0c1e57098")
    with pytest.raises(CalibrationError, match="version is unknown"):
        record(cpu_plan(smollm2_gguf, ctx=4096, parallel=1), real, None)
    assert records() == [] and not store_path().exists()


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b'{"schema": 99, "records": []}',
        b'{"schema": 1, "records": [{"key": 1}]}',
        b"\xff\xfe",
    ],
)
def test_corrupt_store_is_moved_aside_not_fatal(
    content: bytes, smollm2_gguf: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store_path().write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="homelab.plan.record_store"):
        plan, _ = plan_from_args(_args(smollm2_gguf, "--ctx", "4096", "--parallel", "1"))
    assert "estimated" in _compute_step(plan)
    assert not store_path().exists()
    aside = list(store_path().parent.glob("calibration.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == content  # nothing lost
    assert any("moved it to calibration.json.corrupt-" in r.getMessage() for r in caplog.records)
    assert records() == []


def test_a_record_with_wrong_types_is_moved_aside(smollm2_gguf: Path) -> None:
    args = _args(smollm2_gguf, "--ctx", "4096", "--parallel", "1")
    plan, _ = plan_from_args(args)
    key = key_for(plan, read_model(smollm2_gguf), "b11312-0c1e57098")
    size = 20 * MiB
    save(Calibration(key, size, size, size, None, None, None, None, "2026-01-01T00:00:00+0000"))
    assert len(records()) == 1
    data = json.loads(store_path().read_text("utf-8"))
    data["records"][0]["measured_compute"] = (
        "20 MiB"  # hand-edited: a string the planner cannot add
    )
    store_path().write_text(json.dumps(data), "utf-8")
    assert records() == [] and not store_path().exists()
    assert len(list(store_path().parent.glob("calibration.json.corrupt-*"))) == 1


def test_a_measurement_that_moves_the_plan_says_so(smollm2_gguf: Path) -> None:
    """A compute buffer far above the estimate leaves room for fewer slots: the plan moves to
    flags no run measured, uses the neighbouring measurement and warns."""
    model = read_model(smollm2_gguf)
    report = synthetic_report(2 * 1024 * MiB)
    request = PlanRequest(ctx=None, parallel=None)
    plan = make_plan(model, str(smollm2_gguf), report, request)
    key = key_for(plan, model, "b11312-0c1e57098")
    estimate = plan.candidate.engine.compute_buffer
    big = estimate + 400 * MiB
    save(Calibration(key, big, big, estimate, None, None, None, None, "2026-01-01T00:00:00+0000"))
    moved = plan_model(
        model, str(smollm2_gguf), report, plan_options(), engine_version="b11312-0c1e57098"
    )
    assert moved.settings.n_seq < plan.settings.n_seq
    # the neighbouring measurement's error (logged − predicted) corrects the moved flags' estimate
    s = moved.settings
    at_moved = make_plan(
        model, str(smollm2_gguf), report, PlanRequest(ctx=s.n_ctx, parallel=s.n_seq)
    ).candidate.engine
    corrected = at_moved.compute_buffer - at_moved.fa_scratch + (big - estimate)
    assert moved.candidate.engine.measured_compute == corrected
    assert not moved.candidate.measured_here
    assert any("which no run has measured yet" in w for w in moved.warnings)
    assert "measured" in _compute_step(moved)


def test_cuda_measurement_counts_the_flash_attention_copy_once(smollm2_gguf: Path) -> None:
    """On CUDA the logged compute buffer already holds the F16 K/V copy that the plan prices
    per token; the measured figure leaves it out so the re-plan adds it back exactly once.
    (Log lines in llama.cpp's format for the card this machine lacks.)"""
    model = read_model(smollm2_gguf)
    report = probe(snapshot=NO_GPU.with_name("rtx3090_headless.json"))
    plan = make_plan(model, str(smollm2_gguf), report, PlanRequest(ctx=4096, parallel=2))
    scratch = plan.candidate.engine.fa_scratch
    assert plan.on_gpu and scratch > 0
    logged_mib = 40.25
    text = (
        "llama_context: n_ctx                 = 4096\n"
        "llama_context: n_seq_max             = 2\n"
        f"sched_reserve:      CUDA0 compute buffer size = {logged_mib:8.2f} MiB\n"
        "sched_reserve:  CUDA_Host compute buffer size =     9.01 MiB\n"
    )
    calibration = record(plan, parse_load_log(text), "b11312-0c1e57098", model=model)
    assert calibration.compute == round(logged_mib * MiB)
    assert calibration.measured_compute == calibration.compute - scratch
    assert calibration.key.device == "gpu" and calibration.kv is None  # no KV line: unknown
    again = plan_model(
        model,
        str(smollm2_gguf),
        report,
        plan_options(ctx=4096, slots=2),
        engine_version="b11312-0c1e57098",
    )
    assert again.candidate.engine.compute_buffer == calibration.compute
    assert again.candidate.engine.fa_scratch == scratch


def test_identity_is_the_header_not_the_path(tmp_path: Path, smollm2_gguf: Path) -> None:
    for folder in "abc":
        (tmp_path / folder).mkdir()
    a = write_gguf("llama", tmp_path / "a" / "tiny.gguf")
    b = write_gguf("llama", tmp_path / "b" / "tiny.gguf", n_layer=4)
    same = write_gguf("llama", tmp_path / "c" / "tiny.gguf")
    ia, ib, isame = (model_identity(read_model(p)) for p in (a, b, same))
    assert ia == isame  # same bytes in another folder
    assert ia.name == ib.name and ia.header_sha256 != ib.header_sha256
    smol = model_identity(read_model(smollm2_gguf))
    assert smol.size == smollm2_gguf.stat().st_size
    assert replace(smol, size=smol.size + 1) != smol
