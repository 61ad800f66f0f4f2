"""Each preset's fit on this card: the plan ``homelab plan REPO:QUANT`` would make.

The preset's default quant is resolved to a GGUF header without downloading the model
(a cached file, the header cache, or HTTP range reads) and planned on the card for the
preset's workload hint (or the workload asked for). The verdict is the plan's: fits,
partial (weights spill to the CPU) or does not fit; "unknown" when the header cannot be
had (offline and never read before, the repo or quant gone, no network) or describes
something homelab cannot size. A preset that cannot be judged never stops the listing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Literal

from homelab.errors import DoesNotFitError, HomelabError
from homelab.gguf.header import GgufModel
from homelab.gpu.report import GpuReport
from homelab.hub.presets import Preset
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.workload import Workload

FitVerdict = Literal["fits", "partial", "does_not_fit", "unknown"]
MAX_FETCHES = 4
"""Presets whose headers are fetched at the same time."""
Resolver = Callable[[str], GgufModel]
"""``REPO:QUANT`` -> the model's header(s); raises a HomelabError when it cannot."""


@dataclass(frozen=True, slots=True)
class PresetFit:
    """One preset judged on one card."""

    preset: Preset
    workload: Workload
    verdict: FitVerdict
    plan: Plan | None = None
    """The plan behind a fits/partial verdict; None otherwise."""
    file_bytes: int | None = None
    """Size of the quant's file(s) when the source said; None when unknown."""
    weights_bytes: int | None = None
    """Tensor bytes the header describes (what the plan places); None without a header."""
    reason: str | None = None
    """Why the verdict is unknown or does_not_fit, in a sentence."""
    problem: str | None = None
    """The short title of that reason (the error's), e.g. "Offline"; None when there is none."""
    warnings: tuple[str, ...] = ()

    @property
    def tokens_fit(self) -> int | None:
        """Total tokens of context that fit at the plan's slot count; None without a plan."""
        return self.plan.tokens_fit if self.plan else None

    @property
    def slots(self) -> int | None:
        """Conversations (llama-server slots) the plan runs; None without a plan."""
        return self.plan.settings.n_seq if self.plan else None

    @property
    def ctx_per_slot(self) -> int | None:
        return self.plan.candidate.allocation.ctx_per_slot if self.plan else None

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self.plan.candidate.allocation.bytes_per_token if self.plan else None


def fit_preset(
    preset: Preset,
    report: GpuReport,
    request: PlanRequest,
    *,
    resolve: Resolver | None = None,
    workload: Workload | None = None,
) -> PresetFit:
    """Plan ``preset``'s default quant on the card in ``report``.

    Args:
        request: the shared plan options (cache types, ubatch, GPU...); its workload is
            replaced by ``workload``, or by the preset's hint when ``workload`` is None.
        resolve: turns ``REPO:QUANT`` into a header; default: ``homelab.hub.model_ref``.

    Never raises for one preset's trouble: a header that cannot be had or sized gives
    ``verdict="unknown"`` with the reason, a plan that cannot fit ``"does_not_fit"``.
    """
    header = _fetch(preset, resolve or default_resolver())
    return _judge(preset, header, report, request, workload or preset.workload)


def fit_presets(
    presets: Iterable[Preset],
    report: GpuReport,
    request: PlanRequest,
    *,
    resolve: Resolver | None = None,
    workload: Workload | None = None,
) -> list[PresetFit]:
    """``fit_preset`` for each preset, in order, on the same card.

    Headers are fetched ``MAX_FETCHES`` at a time (each uncached one costs a listing
    call and a few range requests: waiting for them one by one is most of the time
    ``homelab presets`` takes); the planning then runs in this thread, one by one.
    """
    resolve = resolve or default_resolver()
    todo = list(presets)
    if len(todo) > 1:
        with ThreadPoolExecutor(max_workers=min(MAX_FETCHES, len(todo))) as pool:
            headers = list(pool.map(lambda p: _fetch(p, resolve), todo))
    else:
        headers = [_fetch(p, resolve) for p in todo]
    return [
        _judge(p, header, report, request, workload or p.workload)
        for p, header in zip(todo, headers, strict=True)
    ]


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
    request: PlanRequest,
    wanted: Workload,
) -> PresetFit:
    if isinstance(header, HomelabError):
        return PresetFit(preset, wanted, "unknown", reason=_sentence(header), problem=header.title)
    sizes = {"file_bytes": _file_bytes(header), "weights_bytes": header.weights_bytes}
    warnings = _arch_warnings(preset, header)
    try:
        plan = make_plan(header, preset.ref, report, replace(request, workload=wanted))
        plan = _calibrated(plan, header, report)
    except HomelabError as error:
        verdict: FitVerdict = "does_not_fit" if isinstance(error, DoesNotFitError) else "unknown"
        reason, problem = _sentence(error), error.title
        return PresetFit(
            preset, wanted, verdict, reason=reason, problem=problem, warnings=warnings, **sizes
        )
    return PresetFit(preset, wanted, plan.verdict, plan=plan, warnings=warnings, **sizes)


def default_resolver() -> Resolver:
    """Resolve ``REPO:QUANT`` the way ``homelab plan REPO:QUANT`` does (no download)."""
    from homelab.hub.model_ref import resolve_model

    return resolve_model


def _calibrated(plan: Plan, model: GgufModel, report: GpuReport) -> Plan:
    """The plan with a compute buffer measured by an earlier run, as ``homelab plan`` uses."""
    from homelab.plan.calibration import apply_calibration

    return apply_calibration(plan, model, report)


def _file_bytes(model: GgufModel) -> int | None:
    sizes = [part.file_size for part in model.parts]
    return sum(sizes) if all(isinstance(s, int) for s in sizes) else None  # type: ignore[misc]


def _arch_warnings(preset: Preset, model: GgufModel) -> tuple[str, ...]:
    if preset.arch is None or model.arch is None or model.arch == preset.arch:
        return ()
    warning = (
        f"the preset says architecture {preset.arch!r}, the file says {model.arch!r}: "
        "the file is what homelab plans with"
    )
    return (warning,)


def _sentence(error: HomelabError) -> str:
    """``Title: message. Hint`` on one line, for a table's footnote or a JSON field."""
    text = f"{error.title}: {error.message}".rstrip()
    if error.hint is None:
        return text
    return f"{text}{'' if text.endswith(('.', '!', '?')) else '.'} {error.hint}"
