"""Judge a local model on a card for every front-end, and find what ``homelab bench`` measured
of a plan: with the calibration, stored misses and bench records of the llama-server build
homelab would run (found only when one is needed). Presets and a Hub repo's quants are judged
the same way by :mod:`homelab.serve.preset_fit` and :mod:`homelab.serve.quant_fit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from homelab.engine.llamacpp.calibrate import current_engine_version

if TYPE_CHECKING:
    from homelab.errors import HomelabError
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.plan.judge import Fit
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan


def judge_model(
    model: GgufModel | HomelabError, label: str, report: GpuReport, options: PlanOptions
) -> Fit:
    """A local GGUF's verdict, shown as ``label`` (never raises for the model's own trouble)."""
    from homelab.engine.kinds import gguf_kind

    return gguf_kind().verdict(model, label, report, options, engine_version=current_engine_version)


def benches(plan: Plan, model: GgufModel) -> list[dict[str, Any]]:
    """The stored ``homelab bench`` records of what ``plan`` would run on this build, one per
    workload ([] when none; the engine is not asked when nothing was ever measured)."""
    from homelab.measure.key import key_for_plan
    from homelab.measure.store import folder, load_all

    if not folder().is_dir():
        return []
    key = key_for_plan(plan, model, current_engine_version())
    return [] if key is None else load_all(key)


def with_bench(plan: Plan, model: GgufModel) -> tuple[Plan, list[dict[str, Any]]]:
    """``plan`` as shown with what ``homelab bench`` stored of it: its decode estimate replaced
    by the measured rate (when one was measured), and the records."""
    from homelab.measure.summary import decode_measured
    from homelab.plan.decode_bound import with_measured

    records = benches(plan, model)
    found = decode_measured(records)
    return (plan if found is None else with_measured(plan, *found)), records
