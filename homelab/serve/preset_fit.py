"""Each preset's fit on this card: the plan ``homelab plan REPO:QUANT`` would make.

The preset's default quant is resolved to a GGUF header without downloading the model
(a cached file, the header cache, or HTTP range reads) and judged on the card
(:func:`homelab.plan.judge.judge`) for the preset's workload hint (or the workload the
options ask for). The verdict is the judge's :class:`~homelab.plan.judge.Fit`: fits,
partial (weights spill to the CPU), does not fit, or unknown when the header cannot be
had (offline and never read before, the repo or quant gone, no network) or describes
something homelab cannot size. A preset that cannot be judged never stops the listing.

When no header can be had, a preset's own ``[facts]`` (:mod:`homelab.hub.preset_facts`)
stand in for it and the result says so (``source="preset"``);
:func:`fit_preset_from_facts` judges from the facts alone, at once and offline. The facts
plan through the same domain as a header (:func:`homelab.plan.judge.judge`), offload ladder
included: a MoE preset whose facts give its routed experts' bytes is judged with the experts
of as few layers in system RAM as the workload needs, as its real header would be. One whose
facts do not (an older preset file) is judged without that rung, and says so
(:attr:`PresetFit.ladder_skipped`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

from homelab.engine.kinds import gguf_kind
from homelab.engine.llamacpp.calibrate import current_engine_version
from homelab.errors import HomelabError
from homelab.gguf.header import GgufModel
from homelab.gpu.report import GpuReport
from homelab.hub.preset_facts import lacks_expert_bytes, stand_in
from homelab.hub.presets import Preset
from homelab.plan.calibration import EngineVersion
from homelab.plan.judge import Fit
from homelab.plan.options import PlanOptions

MAX_FETCHES = 4
"""Presets whose headers are fetched at the same time."""
Resolver = Callable[[str], GgufModel]
"""``REPO:QUANT`` -> the model's header(s); raises a HomelabError when it cannot."""
Source = Literal["header", "preset"]
"""What a verdict was planned from: the model's real header, or the preset's facts."""


class NoFactsError(HomelabError):
    """Neither a header has been read for the model nor does its preset give facts."""

    title = "Never read"


@dataclass(frozen=True, slots=True)
class PresetFit:
    """One preset and its verdict on the card."""

    preset: Preset
    fit: Fit
    warnings: tuple[str, ...] = ()
    """The preset's own (e.g. its arch is not the file's), besides the plan's."""
    source: Source | None = "header"
    """Planned from the real header, or from the preset's facts; None: from neither."""
    ladder_skipped: str | None = None
    """Why experts in system RAM were not considered (facts without the experts' bytes);
    None when they were, or the model has none. Also in ``warnings``."""


def fit_preset(
    preset: Preset,
    report: GpuReport,
    options: PlanOptions,
    *,
    resolve: Resolver | None = None,
    engine_version: EngineVersion = current_engine_version,
) -> PresetFit:
    """Judge ``preset``'s default quant on the card in ``report``.

    Args:
        options: the plan options (cache types, ubatch, GPU...); the preset's workload
            hint applies when ``options.workload.per_slot`` is None.
        resolve: turns ``REPO:QUANT`` into a header; default: ``homelab.hub.model_ref``.
        engine_version: the llama-server build (calibration; see ``plan_model``).

    Never raises for one preset's trouble (see :func:`homelab.plan.judge.judge`).
    """
    header = _fetch(preset, resolve or default_resolver())
    return _judge(preset, header, report, options, engine_version)


def fit_presets(
    presets: Iterable[Preset],
    report: GpuReport,
    options: PlanOptions,
    *,
    resolve: Resolver | None = None,
    engine_version: EngineVersion = current_engine_version,
) -> list[PresetFit]:
    """``fit_preset`` for each preset, in order, on the same card.

    Headers are fetched ``MAX_FETCHES`` at a time (each uncached one costs a listing
    call and a few range requests: waiting for them one by one is most of the time
    ``homelab presets`` takes); the planning then runs in this thread, one by one.
    """
    resolve = resolve or default_resolver()
    todo = list(presets)
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_FETCHES, len(todo)))) as pool:
        headers = list(pool.map(lambda p: _fetch(p, resolve), todo))
    return [
        _judge(p, header, report, options, engine_version)
        for p, header in zip(todo, headers, strict=True)
    ]


def fit_preset_from_facts(
    preset: Preset,
    report: GpuReport,
    options: PlanOptions,
    *,
    engine_version: EngineVersion = current_engine_version,
) -> PresetFit:
    """Judge ``preset`` from its ``[facts]`` alone (no file, no network): instant.

    Without facts for its default quant the verdict is unknown and says that no header
    has been read for this model.
    """
    never_read = NoFactsError(
        f"no header has been read for {preset.ref}, and the preset gives no facts for "
        f"{preset.quant}",
        hint="Read it once online (homelab presets), or add a [facts] table to the preset.",
    )
    return _judge(preset, never_read, report, options, engine_version)


def _fetch(preset: Preset, resolve: Resolver) -> GgufModel | HomelabError:
    """The preset's header(s), or the error that says why there are none."""
    try:
        return resolve(preset.ref)
    except HomelabError as error:
        return error


def _judge(
    preset: Preset,
    header: GgufModel | HomelabError,
    report: GpuReport,
    options: PlanOptions,
    engine_version: EngineVersion,
) -> PresetFit:
    source: Source | None = "header"
    warnings: tuple[str, ...] = ()
    if isinstance(header, HomelabError):
        facts = preset.facts
        if facts is not None and preset.quant in facts.quants:
            if not isinstance(header, NoFactsError):
                warnings = (f"planned from the preset's facts: {header.title}: {header.message}",)
            header, source = (
                stand_in(facts, preset.quant, f"{preset.ref} (from the preset)"),
                "preset",
            )
        else:
            source = None
    fit = gguf_kind().verdict(
        header,
        preset.ref,
        report,
        options,
        default_workload=preset.workload,
        engine_version=engine_version,
    )
    if source == "header":
        warnings = _arch_warnings(preset, header)  # type: ignore[arg-type]
    skipped = None
    if source == "preset" and preset.facts and lacks_expert_bytes(preset.facts, preset.quant):
        skipped = ladder_skipped_note(preset)
        fit = _with_note(fit, skipped)
        warnings = (*warnings, skipped)
    return PresetFit(preset, fit, warnings, source, skipped)


def ladder_skipped_note(preset: Preset) -> str:
    """What a MoE preset's facts without its experts' bytes cost the offline verdict."""
    return (
        f"the preset's facts give no routed-expert bytes for {preset.quant} (facts.quants."
        f"{preset.quant}.experts_bytes; an older preset file), so this verdict cannot keep "
        "experts in system RAM: the offload ladder was skipped, and a model that would fit "
        "with its experts in RAM may show as partial or not fitting until its header is read"
    )


def _with_note(fit: Fit, note: str) -> Fit:
    """``fit`` carrying ``note``: among its plan's warnings, else after its hint."""
    if fit.plan is not None:
        return replace(fit, plan=replace(fit.plan, warnings=(*fit.plan.warnings, note)))
    hint = f"{fit.hint} " if fit.hint else ""
    return replace(fit, hint=f"{hint}Note: {note}.")


def default_resolver() -> Resolver:
    """Resolve ``REPO:QUANT`` the way ``homelab plan REPO:QUANT`` does (no download)."""
    from homelab.hub.model_ref import resolve_model

    return resolve_model


def _arch_warnings(preset: Preset, model: GgufModel) -> tuple[str, ...]:
    if preset.arch is None or model.arch is None or model.arch == preset.arch:
        return ()
    warning = (
        f"the preset says architecture {preset.arch!r}, the file says {model.arch!r}: "
        "the file is what homelab plans with"
    )
    return (warning,)
