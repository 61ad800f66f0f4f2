"""The TUI's domain calls that carry a rule of their own: thin calls, no widget touched.

Our own running engine counts as freed in every verdict and plan here (a switch stops it
first); the plan panel's settings become a plan request; the Hub's failures are told
apart from its answers; the engine is supervised detached, so quitting may leave it
running. A flow calls the domain directly where nothing is added (a poller, a header
read, the session's own methods). Every function may block and runs in a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homelab.engine.supervision.state_file import EngineRecord
    from homelab.errors import HomelabError
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.hub.presets import Preset
    from homelab.plan.judge import Fit
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan
    from homelab.plan.workload import Workload
    from homelab.serve.prepare import Prepared
    from homelab.serve.preset_fit import PresetFit, Resolver
    from homelab.serve.quant_choice import QuantsOnCard
    from homelab.serve.replan import Replan
    from homelab.serve.session import ServeSession


# -- settings ----------------------------------------------------------------------------


def plan_options(
    *,
    vram: int | None,
    gpu_snapshot: Path | None,
    port: int | None,
    workload: str | None = None,
    ctx: int | None = None,
    slots: int | None = None,
    cache_type: str | None = None,
) -> PlanOptions:
    """The typed plan request the plan panel's fields describe (``UsageError`` if one is
    bad); without them, the request that reads the card. A coding agent's name as the
    workload (``claude``) plans each slot for what that agent accepts (``--for``)."""
    from homelab.agents.catalog import AGENTS, workload_for
    from homelab.engine.options import plan_options as build

    name = (workload or "").strip().lower()
    return build(
        workload=workload_for(name) if name in AGENTS else workload,
        ctx=ctx,
        slots=slots,
        cache_type=cache_type,
        vram=vram,
        gpu_snapshot=gpu_snapshot,
        sample_seconds=0.0,
        port=port,
    )


def parse_size(text: str) -> int:
    """``"16GiB"`` -> bytes (``UsageError`` when it is not a size)."""
    from homelab.errors import UsageError
    from homelab.units import parse_size as parse

    try:
        return parse(text)
    except ValueError as error:
        raise UsageError(str(error), hint="Give the VRAM setting as e.g. 16GiB.") from None


# -- models ------------------------------------------------------------------------------


def judge_preset(
    preset: Preset, report: GpuReport, options: PlanOptions, resolve: Resolver
) -> PresetFit:
    """The preset's verdict from its header as ``resolve`` reads it (its facts when there is
    none)."""
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.preset_fit import fit_preset

    return fit_preset(preset, without_own_engines(report), options, resolve=resolve)


def judge_preset_seeing_hub(
    preset: Preset,
    report: GpuReport,
    options: PlanOptions,
    seen: Callable[[str | None], None],
) -> PresetFit:
    """The preset's verdict from its header as ``homelab plan`` reads it (its facts when
    there is none), telling ``seen`` how the read went: ``seen(None)`` when the Hub
    answered, ``seen(reason)`` when it could not be reached (or is not asked)."""
    from homelab.hub.errors import HubError
    from homelab.hub.model_ref import resolve_model_ref

    def resolve(ref: str) -> GgufModel:
        try:
            resolved = resolve_model_ref(ref)
        except HubError as error:  # any answer the Hub gave, or none
            seen(hub_unreachable(error))
            raise
        seen(resolved.offline_reason)
        return resolved.model

    return judge_preset(preset, report, options, resolve)


def judge_preset_from_facts(preset: Preset, report: GpuReport, options: PlanOptions) -> PresetFit:
    """The preset's verdict from its own facts alone: instant, offline."""
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.preset_fit import fit_preset_from_facts as judged

    return judged(preset, without_own_engines(report), options)


def judge_model(
    model: GgufModel | HomelabError, label: str, report: GpuReport, options: PlanOptions
) -> Fit:
    """A local GGUF's verdict (never raises for the model's own trouble)."""
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.judge import judge_model as judged

    return judged(model, label, without_own_engines(report), options)


def preset_model_path(preset: Preset) -> Path | None:
    """The preset's quant already in the HF cache, or None (nothing is downloaded here)."""
    from homelab.errors import HomelabError
    from homelab.hub.download import pull

    try:
        return pull(preset.ref, offline=True, mmproj=False).paths[0]
    except HomelabError:
        return None


def cached_ggufs() -> list[Path]:
    """GGUF model files in the standard Hugging Face cache (snapshot paths)."""
    from homelab.hub.hf_cache import cached_ggufs as in_cache
    from homelab.hub.hf_env import hub_cache_dir

    return in_cache(hub_cache_dir())


def local_ggufs(folders: Iterable[Path]) -> list[Path]:
    """GGUF model files directly in (or below) the given folders."""
    from homelab.hub.quant_match import is_model_gguf

    found: list[Path] = []
    for folder in folders:
        for dirpath, _dirs, names in os.walk(folder):
            found += [Path(dirpath) / n for n in sorted(names) if is_model_gguf(n)]
    return found


def prepare(
    model: str,
    report: GpuReport,
    options: PlanOptions,
    default_workload: Workload | None = None,
    served_name: str | None = None,
) -> Prepared:
    """The one planning pass ``homelab plan`` makes too (:func:`homelab.serve.prepare.prepare`),
    on ``report`` with our own running engine counted as freed; ``served_name``: a preset's
    key, the id it is served by."""
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.prepare import prepare as prepare_model

    card = without_own_engines(report)
    return prepare_model(
        model, card, options, default_workload=default_workload, served_name=served_name
    )


def plan_not_downloaded(
    preset: Preset, report: GpuReport, options: PlanOptions
) -> tuple[Plan, list[str]]:
    """What ``homelab plan PRESET`` and ``homelab serve PRESET --dry-run`` plan for a preset
    not downloaded yet (:func:`homelab.serve.preset_plan.plan_preset`), on ``report`` with
    our own running engine counted as freed: from its header, or while the Hub cannot be
    reached from the preset's own facts.

    Raises:
        HomelabError: the Hub's answer (a refusal, no such quant), nothing fits, or (the Hub
            unreachable) no facts for the preset's quant.
    """
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.preset_plan import plan_preset

    planned = plan_preset(preset, without_own_engines(report), options)
    return planned.plan, list(planned.argv)


def measured(plan: Plan, model: GgufModel) -> tuple[Plan, tuple[str, ...]]:
    """The plan as the panel shows it, with the stored ``homelab bench`` results of what it
    would run: its decode estimate replaced by the measured rate, and one line each, then
    the newest's chart of TTFT and tokens/s against concurrency; () when nothing was measured."""
    from homelab.measure.summary import measured_line
    from homelab.measure.text_chart import chart_lines
    from homelab.serve.judge import with_bench

    plan, records = with_bench(plan, model)
    if not records:
        return plan, ()
    newest = max(records, key=lambda r: str(r.get("recorded_at")))
    lines = [measured_line(r, plan.settings.n_seq) for r in records]
    return plan, (*lines, *chart_lines(newest["report"], width=12))


# -- the engine --------------------------------------------------------------------------


def serve_session(
    model: str,
    options: PlanOptions,
    on_event: Callable[[Any], None],
    *,
    default_workload: Workload | None = None,
    report: GpuReport | None = None,
    prepared: Prepared | None = None,
    replace: bool = False,
) -> ServeSession:
    """The domain's serve session for ``model`` (the path ``homelab serve`` takes too).

    It starts from ``prepared`` when given (the preview the app shows: not planned again),
    else plans on ``report`` (the card as the app last saw it, our own running engine
    counted as freed) or, without one, on the card read as ``options`` say. The plan the app
    shows (or re-plans on the card now) is then the plan that runs.

    ``replace``: an engine an earlier homelab left running is stopped first (the person
    confirmed it). Detached but held: the app keeps supervising it, and quitting may leave it running
    for the next ``homelab`` to adopt. Its events go to ``on_event`` on a thread of its own.
    """
    from homelab.gate.config_file import GateChoices
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.request import ServeRequest
    from homelab.serve.session import ServeSession

    request = ServeRequest(
        model,
        options,
        detach=True,
        hold=True,
        default_workload=default_workload,
        report=None if report is None else without_own_engines(report),
        prepared=prepared,
        replace=replace,
        gate=GateChoices(),  # the gate on the public port, its settings from gate.toml
    )
    session = ServeSession(request)
    session.subscribe(on_event)
    return session


def adopt_engine(
    record: EngineRecord, options: PlanOptions, on_event: Callable[[Any], None]
) -> ServeSession:
    """A session for the engine an earlier homelab left running (it adopts it on start).

    Its port is whatever it runs on: this app's port setting does not refuse it.
    """
    from dataclasses import replace

    unpinned = replace(options, engine=replace(options.engine, port=None))
    return serve_session(record.model, unpinned, on_event)


def stop_engine(session: ServeSession) -> None:
    """Stop it (SIGTERM, wait, SIGKILL) and wait until it is gone."""
    session.stop(let_go=False)
    session.close()


def stop_kept(record: EngineRecord) -> None:
    """Stop homelab's keeper of ``record`` (it stops its engine and gate) as ``homelab stop``
    does: the keeper first, then whatever of the gate and the engine outlived it."""
    from homelab.engine.supervision.ownership import stop_engine
    from homelab.engine.supervision.state_file import StateFile
    from homelab.serve.gate import stop_recorded_gate

    stop_recorded_gate(record)
    stop_engine(StateFile(), record)


def leave_running(session: ServeSession, card: Sequence[str] = ()) -> str:
    """Stop supervising; the engine keeps serving, handed to homelab's keeper; what was done,
    in words (:func:`homelab.serve.hand_over.leave_to_keeper`)."""
    from homelab.serve.hand_over import leave_to_keeper

    return leave_to_keeper(session, card)


def public_url(session: ServeSession | None) -> str | None:
    """Where clients go: the gate's URL (the engine's when it runs without one); None until
    the gate listens."""
    return None if session is None else session.public_url


def gate_lines(session: ServeSession | None) -> list[str] | None:
    """What the live panel says of the session's admission gate now (its numbers asked over
    loopback HTTP, worded as ``homelab status`` words them); None without a gate or when it
    does not answer."""
    gate = None if session is None else session.gate
    if gate is None or gate.url is None:
        return None
    from homelab.gate.client import describe_gate_state, live_gate_state

    state = live_gate_state(gate.url)
    return None if state is None else describe_gate_state(state)


def why_not_in_place(session: ServeSession | None) -> str | None:
    """Why the session's engine cannot restart into a new plan in place (then it is stopped
    and started: its gate too); None when it can."""
    if session is None:
        return "no engine of this session runs"
    from homelab.serve.replan import why_not_in_place as why_not

    return why_not(session)


def replan_in_place(
    session: ServeSession, options: PlanOptions, report: GpuReport | None, *, why: str
) -> Replan:
    """Re-plan the running model with ``options`` on ``report`` (the card as the app saw
    it, our own engine counted as freed; None: read the card now), restart the engine into
    it under the same gate (:mod:`homelab.serve.replan`), and wait until it is ready.

    Raises:
        HomelabError: the plan failed (the engine keeps running as it was: the session's
            plan is still the one it served), or the restarted engine did not come up.
    """
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.replan import replan

    card = None if report is None else without_own_engines(report)
    return replan(session, options, report=card, why=why)


# -- the Hub -----------------------------------------------------------------------------


def hub_at_start() -> tuple[str, str | None]:
    """The Hub the app talks to (``HF_ENDPOINT`` or huggingface.co), and why it is not
    asked at all (``HF_HUB_OFFLINE`` set) or None. Reads settings only, no network."""
    from homelab.hub.hf_env import endpoint, offline

    return endpoint(), "HF_HUB_OFFLINE is set" if offline() else None


def hub_unreachable(error: BaseException) -> str | None:
    """Why ``error`` says the Hub cannot be had (no network, offline), or None when the Hub
    answered (a refusal or a missing repo is an answer too)."""
    from homelab.serve.preset_plan import hub_unreachable as unreachable

    return unreachable(error)


def preset_quants(preset: Preset, report: GpuReport, options: PlanOptions) -> QuantsOnCard:
    """Every quant of the preset's repo judged and ranked as ``homelab quants REPO`` does
    (:func:`homelab.serve.quant_choice.quants_on_card`; headers only), on ``report`` with
    our own running engine counted as freed, for the row's workload (the preset's own
    when the row names none)."""
    from homelab.hub.model_ref import DEFAULT_REVISION
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.quant_choice import quants_on_card

    card = without_own_engines(report)
    return quants_on_card(
        preset.repo, DEFAULT_REVISION, options, report=card, default_workload=preset.workload
    )


class DownloadCancelled(Exception):
    """Raised from the progress callback to stop a pull (the partial file is kept)."""


def download(ref: str, progress: Callable[[Any], None]) -> Path:
    """Pull ``ref`` into the HF cache (resuming a partial file); the model file's path.

    Raising from ``progress`` (e.g. :class:`DownloadCancelled`) stops it, keeping the bytes.
    """
    from homelab.hub.download import pull

    return pull(ref, progress=progress, mmproj=False).paths[0]
