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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.engine.llamacpp.reuse_alarm import ReuseWatch
    from homelab.engine.llamacpp.status_poller import StatusPoller
    from homelab.engine.supervision.state_file import EngineRecord
    from homelab.engine.supervision.supervisor import Supervisor, Transition
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
    from homelab.plan.options import PlanOptions
    from homelab.plan.workload import parse_workload

    return PlanOptions(
        workload=parse_workload(workload) if workload else None,
        ctx=ctx,
        slots=slots,
        cache_type_k=cache_type,
        cache_type_v=cache_type,
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


def judge_preset(preset: Preset, report: GpuReport, options: PlanOptions) -> Fit:
    """The preset's verdict on this card (never raises for the preset's own trouble)."""
    from homelab.engine.llamacpp.calibrate import current_engine_version
    from homelab.hub.preset_fit import fit_preset

    return fit_preset(preset, report, options, engine_version=current_engine_version).fit


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
    from homelab.hub.hf_cache import cached_listing
    from homelab.hub.hf_env import hub_cache_dir
    from homelab.hub.quant_match import is_model_gguf

    cache = hub_cache_dir()
    found: list[Path] = []
    for repo_dir in sorted(cache.glob("models--*")):
        repo = repo_dir.name.removeprefix("models--").replace("--", "/", 1)
        listing = cached_listing(cache, repo)
        if listing is None:
            continue
        commit, files = listing
        root = repo_dir / "snapshots" / commit
        found += [root / f.path for f in files if is_model_gguf(f.path)]
    return found


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


def plan(
    model: GgufModel,
    label: str,
    report: GpuReport,
    options: PlanOptions,
    default_workload: Workload | None = None,
) -> Plan:
    """The one planning path (calibration inside)."""
    from homelab.engine.llamacpp.calibrate import current_engine_version
    from homelab.plan.pipeline import plan_model

    return plan_model(
        model,
        label,
        report,
        options,
        default_workload=default_workload,
        engine_version=current_engine_version,
    )


def argv_for(plan: Plan, port: int, server: str = "llama-server") -> list[str]:
    """llama-server's exact command line for the plan."""
    from homelab.engine.llamacpp.argv import llama_server_argv

    return llama_server_argv(plan, server=server, port=port)


# -- the engine --------------------------------------------------------------------------

DEFAULT_PORT = 8080
"""llama-server's default port (as ``homelab.engine.llamacpp.argv`` has it)."""


def engine_binary() -> Path:
    """The llama-server homelab runs (``EngineError`` with the fix when there is none)."""
    from homelab.engine.llamacpp.locate import find_llama_server

    return find_llama_server()


def running_engine() -> EngineRecord | None:
    """The homelab engine the state file says runs, if it does."""
    from homelab.engine.supervision.state_file import StateFile

    return StateFile().live()


def start_engine(
    plan: Plan,
    model_path: Path,
    port: int | None,
    on_change: Callable[[Transition], None],
) -> Supervisor:
    """Start llama-server for ``plan`` under a supervisor (detached: quitting may leave it).

    Returns once the process runs; readiness arrives as a transition to ``on_change``.
    """
    from homelab.engine.llamacpp.diagnose import llama_server_profile
    from homelab.engine.supervision.ports import LOOPBACK, choose_port
    from homelab.engine.supervision.state_file import StateFile
    from homelab.engine.supervision.supervisor import EngineSpec, Supervisor

    binary = engine_binary()
    pinned = port is not None
    choice = choose_port(LOOPBACK, port if port is not None else DEFAULT_PORT, pinned=pinned)
    argv = argv_for(plan, choice.port, server=str(binary))
    spec = EngineSpec(
        argv=tuple(argv),
        model=str(model_path),
        host=LOOPBACK,
        port=choice.port,
        port_pinned=pinned,
        detached=True,
    )
    store = StateFile()
    supervisor = Supervisor(spec, llama_server_profile(plan, model_path.name), state_file=store)
    supervisor.subscribe(on_change)
    with store.claim():
        supervisor.start()
    return supervisor


def adopt_engine(record: EngineRecord, on_change: Callable[[Transition], None]) -> Supervisor:
    """Supervise the engine an earlier homelab left running."""
    from homelab.engine.llamacpp.diagnose import llama_server_profile
    from homelab.engine.supervision.state_file import StateFile
    from homelab.engine.supervision.supervisor import EngineSpec, Supervisor

    spec = EngineSpec(
        argv=record.argv,
        model=record.model,
        host=record.host,
        port=record.port,
        port_pinned=True,
        detached=record.detached,
    )
    store = StateFile()
    supervisor = Supervisor(
        spec, llama_server_profile(None, Path(record.model).name), state_file=store
    )
    supervisor.subscribe(on_change)
    with store.claim():
        supervisor.adopt(record)
    return supervisor


def stop_engine(supervisor: Supervisor) -> None:
    """Stop it (SIGTERM, wait, SIGKILL) and wait until it is gone."""
    supervisor.stop()


def leave_running(supervisor: Supervisor) -> None:
    """Stop supervising; the engine keeps serving (the next homelab adopts it)."""
    supervisor.release()


def engine_log(supervisor: Supervisor, n: int) -> list[str]:
    """The engine's last ``n`` log lines."""
    return supervisor.tail(n)


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
