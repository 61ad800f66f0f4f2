"""Calibration inside the one planning pass: each candidate priced by its own flags' measurement.

The store holds measurements for two flag sets; ``plan_model`` plans once (one
``make_plan``) and lands where the old re-plan loop (plan, look the flags up, re-plan
with that figure, follow the move to the next measured flags) landed.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import homelab.plan.pipeline as pipeline
from homelab.engine.options import plan_options
from homelab.gguf.model_file import read_model
from homelab.gpu.report import synthetic_report
from homelab.plan.calibration import Calibration, save
from homelab.plan.calibration_key import key_for
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.workload import CHAT
from homelab.units import GiB, MiB
from tests.factory import write_gguf

VERSION = "b11312-0c1e57098"


def _store(plan, model, report, measured: int) -> Calibration:
    """The record ``calibrate.measure`` makes of a run at ``plan``'s flags whose buffer less the
    flash-attention scratch came out at ``measured``; predicted: the estimate at those flags."""
    s = plan.settings
    at_flags = PlanRequest(ctx=s.n_ctx, parallel=s.n_seq)
    estimate = make_plan(model, "m", report, at_flags).candidate.engine
    logged = measured + estimate.fa_scratch
    key = key_for(plan, model, VERSION)
    calibration = Calibration(
        key, logged, measured, estimate.compute_buffer, None, None, None, None, "t"
    )
    save(calibration)
    return calibration


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[PlanRequest]:
    calls: list[PlanRequest] = []

    def counting(model, label, report, request, **kwargs):
        calls.append(request)
        return make_plan(model, label, report, request, **kwargs)

    monkeypatch.setattr(pipeline, "make_plan", counting)
    return calls


def test_two_measured_flag_sets_one_pass(tmp_path: Path, counted: list[PlanRequest]) -> None:
    model = read_model(write_gguf("llama", tmp_path / "m.gguf"))
    report = synthetic_report(4 * GiB)
    first = make_plan(model, "m", report, PlanRequest(workload=CHAT))  # estimate: several slots
    assert first.settings.n_seq > 2
    # a run at those flags measured far more than the estimate: fewer slots fit with it
    big = first.candidate.engine.compute_buffer + 150 * MiB
    _store(first, model, report, big)
    moved = make_plan(model, "m", report, PlanRequest(workload=CHAT, measured_compute=big))
    assert moved.settings.n_seq < first.settings.n_seq
    # and a run at the flags it moved to measured its own (smaller) buffer
    own = big - 10 * MiB
    _store(moved, model, report, own)
    old_result = make_plan(model, "m", report, PlanRequest(workload=CHAT, measured_compute=own))
    assert key_for(old_result, model, VERSION) == key_for(moved, model, VERSION)  # it settles

    options = plan_options(workload=CHAT)
    plan = pipeline.plan_model(model, "m", report, options, engine_version=VERSION)
    assert len(counted) == 1  # one planning pass
    assert plan.settings == old_result.settings
    assert plan.candidate.engine == old_result.candidate.engine
    # longer contexts at these slots are priced by their estimate + this run's error (which
    # grows with the context), the old loop priced them at this one figure: never more tokens
    assert 0 < plan.tokens_fit <= old_result.tokens_fit
    assert plan.candidate.engine.measured_compute == own and plan.candidate.measured_here
    assert not any("no run has measured" in w for w in plan.warnings)


def test_each_context_uses_its_own_measurement(tmp_path: Path, counted: list) -> None:
    model = read_model(write_gguf("llama", tmp_path / "m.gguf"))
    report = synthetic_report(8 * GiB)
    figures = {}
    for ctx, extra in ((4096, 3 * MiB), (8192, 7 * MiB)):
        estimate = make_plan(model, "m", report, PlanRequest(ctx=ctx, parallel=1))
        figures[ctx] = _store(
            estimate, model, report, estimate.candidate.engine.compute_buffer + extra
        )
    for ctx, calibration in figures.items():
        plan = pipeline.plan_model(
            model, "m", report, plan_options(ctx=ctx, slots=1), engine_version=VERSION
        )
        assert plan.candidate.engine.measured_compute == calibration.measured_compute
        assert plan.candidate.measured_here
    # another build, or no version at all: the estimate
    for version in ("b1-0000000", None):
        plan = pipeline.plan_model(
            model, "m", report, plan_options(ctx=4096, slots=1), engine_version=version
        )
        assert plan.candidate.engine.measured_compute is None
    # a context no run measured takes the nearest measurement of the same flags, and says so
    plan = pipeline.plan_model(
        model, "m", report, plan_options(ctx=6144, slots=1), engine_version=VERSION
    )
    assert not plan.candidate.measured_here
    nearest = figures[plan.candidate.measurement.ctx]
    estimate = make_plan(model, "m", report, PlanRequest(ctx=6144, parallel=1)).candidate.engine
    error = nearest.compute - nearest.predicted_compute
    assert (
        plan.candidate.engine.measured_compute
        == estimate.compute_buffer - estimate.fa_scratch + error
    )
    assert any("which no run has measured yet" in w for w in plan.warnings)
    # other compute-relevant flags (micro-batch) were never measured: the estimate
    other = pipeline.plan_model(
        model, "m", report, plan_options(ctx=4096, slots=1, ubatch=256), engine_version=VERSION
    )
    assert other.candidate.measurement is None and other.candidate.engine.measured_compute is None
    assert len(counted) == 6


def test_the_version_function_is_called_only_with_a_record_of_this_model(
    tmp_path: Path,
) -> None:
    model = read_model(write_gguf("llama", tmp_path / "m.gguf"))
    report = synthetic_report(8 * GiB)
    asked: list[int] = []

    def version() -> str:
        asked.append(1)
        return VERSION

    pipeline.plan_model(model, "m", report, plan_options(), engine_version=version)
    assert asked == []  # empty store: the engine is never asked
    other = read_model(write_gguf("llama", tmp_path / "o.gguf", n_layer=4))
    _store(make_plan(other, "o", report, PlanRequest()), other, report, 10 * MiB)
    pipeline.plan_model(model, "m", report, plan_options(), engine_version=version)
    assert asked == []  # a record of another model only
    plan = pipeline.plan_model(other, "o", report, plan_options(), engine_version=version)
    assert asked == [1] and plan.candidate.engine.measured_compute == 10 * MiB
    assert replace(plan.request, calibration=None) == plan.request  # not part of equality
