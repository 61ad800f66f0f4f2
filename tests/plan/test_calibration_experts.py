"""Calibration of plans that keep experts in system RAM: the record's key carries
``--n-cpu-moe``, the next plan with the same setting prices the measured compute buffer,
and a plan with another setting (or none) does not take it.

The load log is written in llama.cpp's format for the CUDA card this machine lacks (as
``test_calibration``'s CUDA case does); the real-engine round trip over a worker is out of
reach here, because a plan over an RPC worker is a split and splits are not recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.engine.llamacpp.calibrate import record
from homelab.engine.llamacpp.log import parse_load_log
from homelab.engine.options import plan_options
from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import GpuReport
from homelab.plan.calibration import CalibrationError, measurements_for, records, store_path
from homelab.plan.pipeline import plan_model
from homelab.plan.planner import PlanRequest, make_plan
from homelab.units import MiB
from tests.factory import write_gguf

VERSION = "b11312-0c1e57098"
CARD = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "rtx3090_headless.json"


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> tuple[GgufModel, str]:
    path = write_gguf("qwen3moe", tmp_path_factory.mktemp("cal") / "moe.gguf", n_layer=8)
    return read_model(str(path)), str(path)


def _card() -> GpuReport:
    return probe(snapshot=CARD, window_s=0)


def _log(mib: float) -> str:
    return (
        "llama_context: n_ctx                 = 4096\n"
        "llama_context: n_seq_max             = 1\n"
        f"sched_reserve:      CUDA0 compute buffer size = {mib:8.2f} MiB\n"
        "sched_reserve:        CPU compute buffer size =     9.01 MiB\n"
    )


def _replan(model: GgufModel, path: str, n_cpu_moe: int | None):
    options = plan_options(ctx=4096, slots=1, n_cpu_moe=n_cpu_moe)
    return plan_model(model, path, _card(), options, engine_version=VERSION)


def test_a_plan_with_experts_in_ram_is_recorded_under_its_n_cpu_moe(
    moe: tuple[GgufModel, str],
) -> None:
    model, path = moe
    plan = make_plan(model, path, _card(), PlanRequest(ctx=4096, parallel=1, n_cpu_moe=3))
    assert plan.weights.n_cpu_moe == 3
    estimate = plan.candidate.engine.compute_buffer
    logged = round(estimate / MiB + 7.5, 2)  # well above the estimate: a measurement shows
    calibration = record(plan, parse_load_log(_log(logged)), VERSION, model=model)
    assert calibration.key.n_cpu_moe == 3 and calibration.compute == round(logged * MiB)
    assert json.loads(store_path().read_text("utf-8"))["records"][0]["key"]["n_cpu_moe"] == 3

    again = _replan(model, path, 3)
    assert again.weights.n_cpu_moe == 3
    assert again.candidate.engine.compute_buffer == calibration.compute
    assert again.candidate.measured_here
    # another setting's compute buffer is another one: the estimate, not this record
    for other in (2, 0):
        elsewhere = _replan(model, path, other)
        assert elsewhere.candidate.engine.measured_compute is None, other
        assert elsewhere.candidate.engine.compute_buffer != calibration.compute


def test_a_record_from_before_the_field_reads_as_no_experts_in_ram(
    moe: tuple[GgufModel, str],
) -> None:
    model, path = moe
    plan = make_plan(model, path, _card(), PlanRequest(ctx=4096, parallel=1, n_cpu_moe=0))
    record(plan, parse_load_log(_log(33.0)), VERSION, model=model)
    data = json.loads(store_path().read_text("utf-8"))
    del data["records"][0]["key"]["n_cpu_moe"]  # the store as an older homelab wrote it
    store_path().write_text(json.dumps(data), "utf-8")
    (old,) = records()
    assert old.key.n_cpu_moe == 0
    found = measurements_for(model, VERSION)
    assert found is not None
    assert _replan(model, path, 0).candidate.engine.compute_buffer == round(33.0 * MiB)
    assert _replan(model, path, 3).candidate.engine.measured_compute is None


@pytest.mark.parametrize("bad", [-1, "3", 1.5, None])
def test_a_hand_edited_n_cpu_moe_is_moved_aside(moe: tuple[GgufModel, str], bad: object) -> None:
    model, path = moe
    plan = make_plan(model, path, _card(), PlanRequest(ctx=4096, parallel=1, n_cpu_moe=2))
    record(plan, parse_load_log(_log(30.0)), VERSION, model=model)
    data = json.loads(store_path().read_text("utf-8"))
    data["records"][0]["key"]["n_cpu_moe"] = bad
    store_path().write_text(json.dumps(data), "utf-8")
    assert records() == [] and not store_path().exists()  # a broken cache never stops a plan
    assert _replan(model, path, 2).candidate.engine.measured_compute is None


def test_a_split_plan_is_still_refused(moe: tuple[GgufModel, str]) -> None:
    from homelab.plan.remote_device import RemoteDevice

    model, path = moe
    worker = RemoteDevice(endpoint="127.0.0.1:50052", name="RPC0", total=8 << 30, free=8 << 30)
    split = make_plan(
        model, path, _card(), PlanRequest(ctx=4096, parallel=1, n_cpu_moe=2), remote=(worker,)
    )
    with pytest.raises(CalibrationError, match="split over several devices"):
        record(split, parse_load_log(_log(30.0)), VERSION, model=model)
