"""Judge models on a card for every front-end (a local GGUF, presets, a Hub repo's quants) and
find what ``homelab bench`` measured of a plan: with the calibration, stored misses and bench
records of the llama-server build homelab would run, found here (only when one is needed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from homelab.engine.llamacpp.calibrate import current_engine_version

if TYPE_CHECKING:
    from homelab.errors import HomelabError
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.hub.model_ref import RepoListing
    from homelab.hub.preset_fit import PresetFit, Resolver
    from homelab.hub.presets import Preset
    from homelab.hub.quant_fit import QuantFit
    from homelab.plan.judge import Fit
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan


def judge_model(
    model: GgufModel | HomelabError, label: str, report: GpuReport, options: PlanOptions
) -> Fit:
    """A local GGUF's verdict, shown as ``label`` (never raises for the model's own trouble)."""
    from homelab.plan.judge import judge

    return judge(model, label, report, options, engine_version=current_engine_version)


def judge_preset(
    preset: Preset, report: GpuReport, options: PlanOptions, *, resolve: Resolver | None = None
) -> PresetFit:
    """The preset's verdict from its header (through ``resolve``, else the Hub or its cache)."""
    from homelab.hub.preset_fit import fit_preset

    return fit_preset(
        preset, report, options, resolve=resolve, engine_version=current_engine_version
    )


def judge_preset_from_facts(preset: Preset, report: GpuReport, options: PlanOptions) -> PresetFit:
    """The preset's verdict from its own facts alone: instant, offline."""
    from homelab.hub.preset_fit import fit_preset_from_facts

    return fit_preset_from_facts(preset, report, options, engine_version=current_engine_version)


def judge_presets(
    presets: Iterable[Preset], report: GpuReport, options: PlanOptions
) -> list[PresetFit]:
    """Every preset's verdict, in order, on the same card (their headers read in parallel)."""
    from homelab.hub.preset_fit import fit_presets

    return fit_presets(presets, report, options, engine_version=current_engine_version)


def judge_quants(listing: RepoListing, report: GpuReport, options: PlanOptions) -> list[QuantFit]:
    """Every quant of a Hub repo judged on the card, smallest first (raises as ``fit_quants``)."""
    from homelab.hub.quant_fit import fit_quants

    return fit_quants(listing, report, options, engine_version=current_engine_version)


def benches(plan: Plan, model: GgufModel) -> list[dict[str, Any]]:
    """The stored ``homelab bench`` records of what ``plan`` would run on this build, one per
    workload ([] when none; the engine is not asked when nothing was ever measured)."""
    from homelab.measure.key import key_for_plan
    from homelab.measure.store import folder, load_all

    if not folder().is_dir():
        return []
    key = key_for_plan(plan, model, current_engine_version())
    return [] if key is None else load_all(key)
