"""The homelab App: one main screen (card, models menu, plan, server), its keys and workers.

:func:`make_app` builds it for the command line (``homelab``, ``homelab ui``) and the
tests; :func:`run_app` runs it and makes sure no engine is left supervised by a dead app.
Blocking work (the card probe, header reads, plans, starting and stopping the engine)
runs in thread workers that post the past-tense messages of :mod:`homelab.ui.messages`;
the card refresh re-arms itself with ``set_timer`` after each probe, so probes never pile up.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Log
from textual.worker import Worker, WorkerState, get_current_worker

from homelab.errors import DoesNotFitError, HomelabError, UsageError
from homelab.ui import backend
from homelab.ui.catalog import (
    Judgement,
    ModelEntry,
    judgement_of_error,
    judgement_of_fit,
    judgement_of_plan,
)
from homelab.ui.messages import (
    CardFailed,
    CardRead,
    EngineChanged,
    EngineFailed,
    EngineStarted,
    EngineStopped,
    ModelJudged,
    ModelsListed,
    PlanFailed,
    PlanMade,
)
from homelab.ui.screens import ConfirmScreen, QuitScreen
from homelab.ui.widgets.card import CardPanel
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.plan import PlanPanel
from homelab.ui.widgets.server import ServerPanel, failure_text
from homelab.units import format_bytes

REFRESH_S = 1.0
"""How often the card is read again (after the previous read finished)."""
LOG_TAIL = 200


class HomelabApp(App[int]):
    """See the module docstring."""

    TITLE = "homelab"
    CSS_PATH = "homelab.tcss"
    BINDINGS = [
        Binding("slash", "filter", "filter"),
        Binding("s", "start", "start/switch"),
        Binding("x", "stop", "stop"),
        Binding("r", "restart", "restart"),
        Binding("l", "focus_log", "log"),
        Binding("c", "copy_url", "copy URL"),
        Binding("q", "quit_app", "quit"),
    ]

    def __init__(
        self,
        *,
        gpu_snapshot: Path | None = None,
        vram: int | None = None,
        models_dirs: Iterable[Path] = (),
        port: int | None = None,
        refresh_s: float = REFRESH_S,
        blink: bool = True,
        adopt: bool = True,
    ) -> None:
        super().__init__()
        self.gpu_snapshot = gpu_snapshot
        self.vram = vram
        self.models_dirs = tuple(models_dirs)
        self.port = port
        self.refresh_s = refresh_s
        self.blink = blink
        self.adopt = adopt
        self.report: Any = None
        self.budgets: list[Any] = []
        self.picked: ModelEntry | None = None
        self.plan: Any = None
        self.argv: list[str] = []
        self.model_path: Path | None = None
        self.supervisor: Any = None
        self.running: ModelEntry | None = None
        self.running_plan: Any = None
        self.engine_state: str | None = None
        self.ready_at: float | None = None
        self.restarts = 0
        self._headers: dict[Path, Any] = {}

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Vertical(id="left"):
            yield CardPanel(id="card")
            yield ServerPanel(id="server")
        with Vertical(id="right"):
            yield ModelsMenu(id="menu")
            yield PlanPanel(id="plan", blink=self.blink)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#models", DataTable).focus()
        self.query_one("#filter").cursor_blink = self.blink
        self.probe_card()
        self.list_models()
        if self.adopt:
            self.adopt_running()

    def get_system_commands(self, screen: Screen) -> Iterator[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Filter models", "Narrow the models menu (/)", self.action_filter)
        yield SystemCommand("Start or switch", "Start the picked model (s)", self.action_start)
        yield SystemCommand("Stop the engine", "Stop the running engine (x)", self.action_stop)
        yield SystemCommand(
            "Restart the engine", "Stop and start it again (r)", self.action_restart
        )
        yield SystemCommand("Focus the log", "The engine's log (l)", self.action_focus_log)
        yield SystemCommand(
            "Copy the URL", "The engine's URL to the clipboard (c)", self.action_copy_url
        )
        yield SystemCommand(
            "Quit homelab", "Ask about a running engine first (q)", self.action_quit_app
        )

    # -- options ---------------------------------------------------------------------------

    def card_options(self) -> Any:
        return backend.plan_options(
            workload=None,
            ctx=None,
            slots=None,
            cache_type=None,
            vram=self.vram,
            gpu_snapshot=self.gpu_snapshot,
            port=self.port,
        )

    def plan_options(self) -> Any:
        """The plan request the plan panel's fields describe (``UsageError`` when one is bad)."""
        values = self.query_one("#plan", PlanPanel).values()
        return backend.plan_options(
            workload=values["workload"] or None,
            ctx=int(values["ctx"]) if values["ctx"] else None,
            slots=int(values["slots"]) if values["slots"] else None,
            cache_type=values["cache"],
            vram=self.vram,
            gpu_snapshot=self.gpu_snapshot,
            port=self.port,
        )

    # -- the card --------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="card", exit_on_error=False)
    def probe_card(self) -> None:
        try:
            report = backend.read_card(self.card_options())
            indexes = [d.index for d in report.devices] or [None]
            budgets = [backend.device_budget(report, i) for i in indexes]
        except HomelabError as error:
            self.post_message(CardFailed(error))
            return
        self.post_message(CardRead(report, budgets))

    def on_card_read(self, message: CardRead) -> None:
        first = self.report is None
        changed = message.report != self.report
        self.report, self.budgets = message.report, message.budgets
        if changed:  # an unchanged card is not drawn again (idle CPU)
            self._show_card()
        if self.supervisor is not None:
            self._show_engine()
        if first and self.query_one("#menu", ModelsMenu).entries:
            self.judge_models(self.query_one("#menu", ModelsMenu).entries)
        self._rearm()

    def on_card_failed(self, message: CardFailed) -> None:
        self.query_one("#card", CardPanel).show_error(message.error)
        self._rearm()

    def _rearm(self) -> None:
        if self.refresh_s > 0:
            self.set_timer(self.refresh_s, self.probe_card)

    def _show_card(self) -> None:
        if self.report is None:
            return
        plan = self.running_plan or self.plan
        planned = self.running_plan is None
        self.query_one("#card", CardPanel).show(self.report, self.budgets, plan, planned)

    # -- models ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="models", exit_on_error=False)
    def list_models(self) -> None:
        entries: list[ModelEntry] = []
        try:
            presets = backend.presets()
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            presets = []
        for preset in presets:
            if preset.engine == "llama.cpp":
                entries.append(
                    ModelEntry(
                        f"preset:{preset.key}", preset.key, preset.quant, "preset", preset=preset
                    )
                )
        for source, paths in (
            ("cache", backend.cached_ggufs()),
            ("dir", backend.local_ggufs(self.models_dirs)),
        ):
            for path in paths:
                entries.append(
                    ModelEntry(
                        str(path),
                        _model_name(path, source),
                        backend.quant_of(path),
                        source,
                        path=path,
                        size=_size(path),
                    )
                )
        self.post_message(ModelsListed(entries))

    def on_models_listed(self, message: ModelsListed) -> None:
        self.query_one("#menu", ModelsMenu).set_entries(message.entries)
        if self.report is not None:
            self.judge_models(message.entries)

    @work(thread=True, exclusive=True, group="verdicts", exit_on_error=False)
    def judge_models(self, entries: list[ModelEntry]) -> None:
        worker = get_current_worker()
        try:
            options = self.plan_options()
        except (UsageError, ValueError):
            return
        report = self.report
        for entry in entries:
            if worker.is_cancelled:
                return
            self.post_message(ModelJudged(entry.key, self._judge(entry, report, options)))

    def _judge(self, entry: ModelEntry, report: Any, options: Any) -> Judgement:
        if entry.preset is not None:
            return judgement_of_fit(backend.judge_preset(entry.preset, report, options))
        try:
            plan = backend.plan(self._header(entry.path), entry.name, report, options)
        except DoesNotFitError as error:
            return judgement_of_error(error, entry.size, does_not_fit=True)
        except HomelabError as error:
            return judgement_of_error(error, entry.size, does_not_fit=False)
        return judgement_of_plan(plan, entry.size)

    def _header(self, path: Path) -> Any:
        header = self._headers.get(path)
        if header is None:
            header = self._headers[path] = backend.read_header(path)
        return header

    def on_model_judged(self, message: ModelJudged) -> None:
        self.query_one("#menu", ModelsMenu).set_judgement(message.key, message.judgement)

    # -- the plan --------------------------------------------------------------------------

    @on(ModelsMenu.Picked)
    def _picked(self, message: ModelsMenu.Picked) -> None:
        self.pick(message.entry)

    def pick(self, entry: ModelEntry) -> None:
        self.picked = entry
        self.query_one("#plan", PlanPanel).show_planning(entry.name)
        self.plan_picked(entry)

    @on(PlanPanel.SettingsChanged)
    def _settings_changed(self, message: PlanPanel.SettingsChanged) -> None:
        menu = self.query_one("#menu", ModelsMenu)
        if self.report is not None and menu.entries:
            menu.clear_judgements()
            self.judge_models(menu.entries)
        if self.picked is not None:
            self.plan_picked(self.picked)

    @work(thread=True, exclusive=True, group="plan", exit_on_error=False)
    def plan_picked(self, entry: ModelEntry) -> None:
        try:
            options = self.plan_options()
            report = self.report or backend.read_card(self.card_options())
            path = entry.path
            if entry.preset is not None:
                path = backend.preset_model_path(entry.preset)
            if path is not None:
                default = entry.preset.workload if entry.preset is not None else None
                plan = backend.plan(self._header(path), str(path), report, options, default)
            else:
                fit = backend.judge_preset(entry.preset, report, options)
                if fit.plan is None:
                    raise HomelabError(
                        fit.reason or "its header could not be read",
                        title=fit.problem or "Cannot plan this preset",
                        hint="Download it first (`homelab pull`), or check the network.",
                    )
                plan = fit.plan
            argv = backend.argv_for(plan, self.port or backend.DEFAULT_PORT)
        except HomelabError as error:
            self.post_message(PlanFailed(entry.key, error))
            return
        except ValueError as error:
            self.post_message(PlanFailed(entry.key, UsageError(str(error))))
            return
        self.post_message(PlanMade(entry.key, plan, argv, path))

    def on_plan_made(self, message: PlanMade) -> None:
        if self.picked is None or message.key != self.picked.key:
            return
        self.plan, self.argv, self.model_path = message.plan, message.argv, message.model_path
        note = None
        if self.running is not None and self.running.key != message.key:
            note = f"{self.running.name} runs now; s switches to this plan (it is stopped first)."
        self.query_one("#plan", PlanPanel).show_plan(self.picked.name, self.plan, self.argv, note)
        self._show_card()

    def on_plan_failed(self, message: PlanFailed) -> None:
        if self.picked is None or message.key != self.picked.key:
            return
        self.plan, self.argv, self.model_path = None, [], None
        self.query_one("#plan", PlanPanel).show_error(self.picked.name, message.error)
        self._show_card()

    # -- the engine ------------------------------------------------------------------------

    def engine_alive(self) -> bool:
        return self.supervisor is not None and self.engine_state not in (None, "stopped")

    def action_start(self) -> None:
        if self.picked is None or self.plan is None:
            self.notify("Pick a model first (enter on a row).", title="Nothing to start")
            return
        if self.model_path is None:
            self.notify(
                f"{self.picked.name} is not downloaded yet: `homelab pull` it first.",
                title="Not downloaded",
                severity="warning",
            )
            return
        entry, plan, path = self.picked, self.plan, self.model_path
        if self.engine_alive():
            if self.running is not None and self.running.key == entry.key:
                self.notify(f"{entry.name} is already running.", title="Running")
                return
            frees = self.running_plan_bytes()
            question = (
                f"Stop {self.running.name if self.running else 'the running engine'} "
                f"(pid {self.supervisor.pid}{frees}) and start {entry.name}?"
            )

            def answered(yes: bool | None) -> None:
                if yes:
                    self.run_engine(entry, plan, path, stop_first=True)

            self.push_screen(ConfirmScreen(question), answered)
            return
        self.run_engine(entry, plan, path, stop_first=False)

    def running_plan_bytes(self) -> str:
        plan = self.running_plan
        if plan is None:
            return ""
        held = plan.weights_on_device + plan.candidate.cost
        return f", frees about {format_bytes(held, precision=1)}"

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def run_engine(self, entry: ModelEntry, plan: Any, path: Path, *, stop_first: bool) -> None:
        try:
            if stop_first and self.supervisor is not None:
                backend.stop_engine(self.supervisor)
                self.post_message(EngineStopped(released=False))
            supervisor = backend.start_engine(plan, path, self.port, self._on_transition)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        self.post_message(EngineStarted(entry.key, (supervisor, entry, plan)))

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def adopt_running(self) -> None:
        try:
            record = backend.running_engine()
            if record is None or record.supervised_by_other():
                return
            supervisor = backend.adopt_engine(record, self._on_transition)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        path = Path(record.model)
        entry = ModelEntry(
            str(path), _model_name(path, "dir"), backend.quant_of(path), "dir", path=path
        )
        self.post_message(EngineStarted(entry.key, (supervisor, entry, None)))

    def _on_transition(self, transition: Any) -> None:
        """Called on the supervisor's thread: hand over, never block it."""
        self.post_message(EngineChanged(transition))

    def on_engine_started(self, message: EngineStarted) -> None:
        self.supervisor, self.running, self.running_plan = message.supervisor
        self.engine_state = self.supervisor.state.value
        self.restarts = 0
        self.ready_at = None
        self.query_one("#server", ServerPanel).clear_log()
        self._show_engine()
        self._show_card()

    def on_engine_changed(self, message: EngineChanged) -> None:
        transition = message.transition
        if self.supervisor is None:
            return
        self.engine_state = transition.state.value
        if transition.state.value == "ready":
            self.ready_at = transition.monotonic
        elif transition.state.value == "restarting":
            self.restarts += 1
            self.ready_at = None
        elif transition.state.value == "stopped":
            self.ready_at = None
        self._show_engine(failure_text(transition.failure))
        if transition.state.value == "ready" and self.supervisor.url:
            self.notify(
                f"{self.running.name if self.running else 'engine'} is ready at {self.supervisor.url}"
            )

    def on_engine_stopped(self, message: EngineStopped) -> None:
        self.engine_state = "stopped"
        self.ready_at = None
        self.running_plan = None
        self._show_engine()
        self._show_card()

    def on_engine_failed(self, message: EngineFailed) -> None:
        error = message.error
        text = error.message + (f"\n{error.hint}" if error.hint else "")
        self.notify(text, title=error.title, severity="error", timeout=15)

    def _show_engine(self, detail: str | None = None) -> None:
        panel = self.query_one("#server", ServerPanel)
        if self.supervisor is None:
            panel.show_state(None, None, None, 0, None)
            return
        uptime = None
        if self.ready_at is not None:
            uptime = _duration(time.monotonic() - self.ready_at)
        url = self.supervisor.url if self.engine_state == "ready" else None
        name = self.running.name if self.running else None
        panel.show_state(self.engine_state, url, uptime, self.restarts, detail, name)
        panel.show_log(backend.engine_log(self.supervisor, LOG_TAIL))

    def action_stop(self) -> None:
        if not self.engine_alive():
            self.notify("No engine is running.", title="Nothing to stop")
            return
        self.stop_running()

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def stop_running(self, then_exit: bool = False) -> None:
        try:
            backend.stop_engine(self.supervisor)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
        self.post_message(EngineStopped(released=False))
        if then_exit:
            self.call_from_thread(self.exit, 0)

    def action_restart(self) -> None:
        if not self.engine_alive() or self.running is None or self.running_plan is None:
            self.notify("No engine of this session to restart.", title="Nothing to restart")
            return
        self.run_engine(
            self.running, self.running_plan, Path(self.supervisor.spec.model), stop_first=True
        )

    def action_filter(self) -> None:
        self.query_one("#menu", ModelsMenu).open_filter()

    def action_focus_log(self) -> None:
        self.query_one("#log", Log).focus()

    def action_copy_url(self) -> None:
        url = self.supervisor.url if self.engine_alive() and self.engine_state == "ready" else None
        if url is None:
            self.notify("No engine is ready.", title="No URL")
            return
        self.copy_to_clipboard(url)
        self.notify(f"Copied {url}", title="URL")

    def action_quit_app(self) -> None:
        if not self.engine_alive():
            self.exit(0)
            return
        what = f"{self.running.name if self.running else 'An engine'} (pid {self.supervisor.pid})"

        def answered(choice: str | None) -> None:
            if choice == "stop":
                self.stop_running(then_exit=True)
            elif choice == "leave":
                self.leave_and_exit()

        self.push_screen(QuitScreen(what), answered)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def leave_and_exit(self) -> None:
        try:
            backend.leave_running(self.supervisor)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        self.call_from_thread(self.exit, 0)

    def shutdown_engine(self) -> None:
        """After the app ended: stop an engine still supervised (never left orphaned unasked)."""
        supervisor = self.supervisor
        if supervisor is not None and not supervisor.released and not supervisor.wait_stopped(0):
            backend.stop_engine(supervisor)

    # -- errors from workers ---------------------------------------------------------------

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        if event.worker.group == "card":
            self._rearm()
        self.notify(
            f"{type(error).__name__}: {error}",
            title=f"Internal error in {event.worker.group}",
            severity="error",
            timeout=15,
        )


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _model_name(path: Path, source: str) -> str:
    if source == "cache":
        for part in path.parts:
            if part.startswith("models--"):
                return part.removeprefix("models--").replace("--", "/", 1).split("/")[-1]
    return path.stem


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def make_app(
    *,
    gpu_snapshot: Path | None = None,
    vram: int | None = None,
    models_dirs: Iterable[Path] = (),
    port: int | None = None,
    refresh_s: float = REFRESH_S,
    blink: bool = True,
    adopt: bool = True,
) -> HomelabApp:
    """The app the command line runs and the tests drive (same construction for both)."""
    return HomelabApp(
        gpu_snapshot=gpu_snapshot,
        vram=vram,
        models_dirs=models_dirs,
        port=port,
        refresh_s=refresh_s,
        blink=blink,
        adopt=adopt,
    )


def run_app(
    *,
    gpu_snapshot: Path | None = None,
    vram: str | None = None,
    models_dirs: Iterable[Path] = (),
    port: int | None = None,
) -> int:
    """Run the TUI until it quits; the exit status."""
    from homelab.ui.settings import models_dirs_with

    app = make_app(
        gpu_snapshot=gpu_snapshot,
        vram=backend.parse_size(vram) if vram else None,
        models_dirs=models_dirs_with(models_dirs),
        port=port,
    )
    try:
        result = app.run()
    finally:
        app.shutdown_engine()
    return int(result or 0)
