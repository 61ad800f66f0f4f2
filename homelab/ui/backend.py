"""Every call the TUI makes into the domain, in one place: thin calls, no logic.

The app's workers call these functions (never the domain directly), so when the
domain grows its event sources (a GPU telemetry poller, an engine status poller, a
serve session, one "judge a model on this card" function) only this module changes.
Nothing here touches a widget; every function may block and runs in a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homelab.engine.llamacpp.reuse_alarm import ReuseWatch
    from homelab.engine.llamacpp.status_poller import StatusPoller
    from homelab.engine.supervision.state_file import EngineRecord
    from homelab.engine.supervision.supervisor import Supervisor
    from homelab.errors import HomelabError
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.gpu.telemetry import TelemetryPoller
    from homelab.hub.presets import Preset
    from homelab.plan.budget import DeviceBudget
    from homelab.plan.headroom import DesktopGrowth
    from homelab.plan.judge import Fit
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan
    from homelab.plan.workload import Workload
    from homelab.polling import Clock
    from homelab.serve.prepare import Prepared
    from homelab.serve.preset_fit import PresetFit
    from homelab.serve.session import ServeSession


# -- settings ----------------------------------------------------------------------------


def plan_options(
    *,
    workload: str | None,
    ctx: int | None,
    slots: int | None,
    cache_type: str | None,
    vram: int | None,
    gpu_snapshot: Path | None,
    port: int | None,
) -> PlanOptions:
    """The typed plan request the plan panel's fields describe (``UsageError`` if one is bad)."""
    from homelab.engine.options import plan_options as build

    return build(
        workload=workload,
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


# -- the card ----------------------------------------------------------------------------


def read_card(options: PlanOptions) -> GpuReport:
    """One look at the card(s): replay, synthetic size, or the live probe (RAM without a GPU)."""
    from homelab.plan.card import card_for

    return card_for(options)


def device_budget(report: GpuReport, index: int | None = None):
    """How the chosen card's memory divides before the engine (reserved, desktop, other...)."""
    from homelab.plan.budget import device_budget as budget

    return budget(report, index)


# -- models ------------------------------------------------------------------------------


def presets() -> list[Preset]:
    """The shipped and user presets."""
    from homelab.hub.presets import load_presets

    return load_presets()


def loads_gguf(engine: str) -> bool:
    """Whether the engine's models are GGUF files (the TUI lists and previews only those)."""
    from homelab.engine.kinds import engine_kind

    return engine_kind(engine).loads_gguf


def judge_preset(preset: Preset, report: GpuReport, options: PlanOptions) -> PresetFit:
    """The preset's verdict from its header (read or cached; its facts when there is none).

    Our own running engine counts as freed (a switch stops it first), in each verdict here.
    """
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.preset_fit import fit_preset as judged

    return judged(preset, without_own_engines(report), options)


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


def quant_of(path: Path) -> str | None:
    """The quant tag in a GGUF file name (``Q4_K_M``), or None."""
    from homelab.hub.quant_match import quant_tag

    return quant_tag(path.name)


def read_header(path: Path) -> GgufModel:
    """The model's header (``ModelFileError`` when it is not a model llama.cpp loads)."""
    from homelab.gguf.model_file import read_model

    return read_model(path)


def prepare(
    model: str,
    report: GpuReport,
    options: PlanOptions,
    default_workload: Workload | None = None,
) -> Prepared:
    """The one planning pass ``homelab plan`` makes too (:func:`homelab.serve.prepare.prepare`),
    on ``report`` with our own running engine counted as freed."""
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.prepare import prepare as prepare_model

    card = without_own_engines(report)
    return prepare_model(model, card, options, default_workload=default_workload)


def argv_for(plan: Plan, port: int | None, server: str = "llama-server") -> list[str]:
    """llama-server's exact command line for the plan (on its default port when None)."""
    from homelab.engine.kinds import DEFAULT_PORT
    from homelab.engine.llamacpp.argv import llama_server_argv

    return llama_server_argv(plan, server=server, port=port or DEFAULT_PORT)


# -- the engine --------------------------------------------------------------------------


def engine_binary() -> Path:
    """The llama-server homelab runs (``EngineError`` with the fix when there is none)."""
    from homelab.engine.llamacpp.locate import find_llama_server

    return find_llama_server()


def running_engine() -> EngineRecord | None:
    """The homelab engine the state file says runs, if it does."""
    from homelab.engine.supervision.state_file import StateFile

    return StateFile().live()


def serve_session(
    model: str,
    options: PlanOptions,
    on_event: Callable[[Any], None],
    *,
    default_workload: Workload | None = None,
    report: GpuReport | None = None,
    prepared: Prepared | None = None,
) -> ServeSession:
    """The domain's serve session for ``model`` (the path ``homelab serve`` takes too).

    It starts from ``prepared`` when given (the preview the app shows: not planned again),
    else plans on ``report`` (the card as the app last saw it, our own running engine
    counted as freed) or, without one, on the card read as ``options`` say. The plan the app
    shows (or re-plans on the card now) is then the plan that runs.

    Detached but held: the app keeps supervising it, and quitting may leave it running
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
        gate=GateChoices(),  # the gate on the public port, its settings from gate.toml
    )
    session = ServeSession(request)
    session.subscribe(on_event)
    return session


def start_engine(session: ServeSession) -> Supervisor:
    """Plan, decide (adopt / replace / refuse) and start or adopt; returns once it runs."""
    return session.start()


def wait_engine_ready(session: ServeSession) -> None:
    """Wait until it answers; predicted vs actual and calibration follow as events."""
    session.wait_ready()


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


def leave_running(session: ServeSession) -> None:
    """Stop supervising; the engine keeps serving (the next homelab adopts it)."""
    if not session.let_go() and session.supervisor is not None:
        session.supervisor.release()
    session.close()


def public_url(session: ServeSession | None) -> str | None:
    """Where clients go: the gate's URL (the engine's when it runs without one); None until
    the gate listens."""
    return None if session is None else session.public_url


def engine_log(supervisor: Supervisor, n: int) -> list[str]:
    """The engine's last ``n`` log lines."""
    return supervisor.tail(n)


def follow_engine_log(
    supervisor: Supervisor, on_event: Callable[[Any], None]
) -> Callable[[], None]:
    """Every later transition and engine log line to ``on_event``, pushed on a thread of its
    own (never polled); returns the function that unsubscribes."""
    return supervisor.subscribe(on_event, log_lines=True)


# -- downloads ---------------------------------------------------------------------------


class DownloadCancelled(Exception):
    """Raised from the progress callback to stop a pull (the partial file is kept)."""


def download(ref: str, progress: Callable[[Any], None]) -> Path:
    """Pull ``ref`` into the HF cache (resuming a partial file); the model file's path.

    Raising from ``progress`` (e.g. :class:`DownloadCancelled`) stops it, keeping the bytes.
    """
    from homelab.hub.download import pull

    return pull(ref, progress=progress, mmproj=False).paths[0]


# -- live telemetry (the card panel, the growth warning, the metrics panel) ---------------


def gpu_poller(
    snapshot: Path | None, interval_s: float, clock: Clock | None = None
) -> TelemetryPoller:
    """A GPU telemetry poller (not started): the recording played in time, or the driver."""
    from homelab.gpu.telemetry import TelemetryPoller

    return TelemetryPoller(snapshot=snapshot, interval_s=interval_s, clock=clock)


def desktop_growth(
    budget: DeviceBudget, now: GpuReport, planned_on: GpuReport | None
) -> DesktopGrowth | None:
    """How far the desktop grew past the plan's figure (pure)."""
    from homelab.plan.headroom import desktop_growth as growth

    return growth(budget, now, planned_on)


def status_poller(url: Callable[[], str | None], interval_s: float) -> StatusPoller:
    """A llama-server status poller (not started) asking ``url()`` each round."""
    from homelab.engine.llamacpp.status_poller import StatusPoller

    return StatusPoller(url, interval_s=interval_s)


def reuse_watch() -> ReuseWatch:
    """The prompt-cache alarm's rule, fed each engine status in order (no I/O)."""
    from homelab.engine.llamacpp.reuse_alarm import ReuseWatch

    return ReuseWatch()
