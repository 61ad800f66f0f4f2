"""The engine's controls: start, switch, stop, adopt, copy the URL, quit.

A mixin of :class:`homelab.ui.app.HomelabApp`. The engine is started detached, so
quitting may leave it running for the next ``homelab`` to adopt; supervisor transitions
arrive on the supervisor's thread and are handed over as messages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.flow import AppFlow
from homelab.ui.log_feed import LogFeed
from homelab.ui.messages import (
    EngineChanged,
    EngineFailed,
    EngineKept,
    EngineLookedFor,
    EngineStarted,
    EngineStopped,
    ServeEvent,
    while_mounted,
)
from homelab.ui.models_flow import model_name
from homelab.ui.screens import ConfirmScreen, QuitScreen
from homelab.ui.set_flow import set_refusal
from homelab.ui.state import LOOKING, Health, Running
from homelab.ui.what_runs import (
    left_running_question,
    record_as_picked,
    runs_as_picked,
    switch_question,
)
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.server import ServerPanel
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.engine.supervision.record import EngineRecord
    from homelab.engine.supervision.supervisor import Supervisor
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan
    from homelab.serve.prepare import Prepared
    from homelab.serve.session import ServeSession

CLIPBOARD_TOOLS = (["wl-copy"], ["xclip", "-selection", "clipboard"], ["xsel", "-ib"])
"""Linux clipboards Textual's OSC 52 does not reach, tried in order."""


class EngineFlow(AppFlow):
    """Everything about the one engine this app runs or adopted."""

    # -- the engine ------------------------------------------------------------------------

    def action_start(self) -> None:
        picked = self.state.picked
        entry, plan, path = picked.entry, picked.plan, picked.model_path
        if entry is None or plan is None:
            self.notify("Pick a model first (enter on a row).", title="Nothing to start")
            return
        if self.state.looking:
            self.notify(LOOKING, title="A moment")
            return
        refusal = set_refusal(self.state.served_set)
        if refusal is not None and not self.state.engine_alive():
            self.notify(refusal, title="A set of models runs", severity="warning", timeout=10)
            return
        if path is None:
            self.notify(
                f"{entry.name} is not downloaded yet: d downloads it (a quant to pick, with "
                "the fit of each).",
                title="Not downloaded",
                severity="warning",
            )
            return
        try:
            options = self.plan_options()
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        running = self.state.running
        report = self.state.card.report
        prepared = None if picked.preview is None else picked.preview.to_start(report, options)
        start = partial(
            self.run_engine, entry, plan, path, options, report=report, prepared=prepared
        )
        if self.state.engine_alive():
            assert running.supervisor is not None
            if runs_as_picked(running, picked):
                self.notify(f"{entry.name} is already running as planned.", title="Running")
                return
            question = switch_question(running, entry.name, picked, self.running_plan_bytes())
            self._confirm(
                question,
                partial(self._say_and_start, f"Switching to {entry.name}…", start, stop_first=True),
            )
            return
        if self.start_over_kept(entry, picked, start):
            return
        record = _left_running()
        if record is not None and not record.supervised_by_other():
            if not record_as_picked(record, picked):  # the same engine as picked: adopted
                question = left_running_question(record, entry.name)
                self._confirm(
                    question,
                    partial(
                        self._say_and_start,
                        f"Starting {entry.name}…",
                        start,
                        stop_first=False,
                        replace=True,
                    ),
                )
                return
        self.notify(f"Starting {entry.name}…", title="Start")  # seen now, not when it spawned
        start(stop_first=False)

    def _say_and_start(self, said: str, start: Callable[..., object], **how: bool) -> None:
        self.notify(said, title="Start")  # seen now, not when it spawned
        start(**how)

    def _confirm(self, question: str, then: Callable[[], object]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.push_screen(ConfirmScreen(question), answered)

    def running_plan_bytes(self) -> str:
        plan = self.state.running.plan
        if plan is None:
            return ""
        held = plan.weights_on_device + plan.candidate.cost
        return f", frees about {format_bytes(held)}"

    def serve(
        self,
        entry: ModelEntry,
        plan: Plan,
        path: Path,
        options: PlanOptions,
        *,
        stop_first: bool,
        replace: bool = False,
        report: GpuReport | None = None,
        note: str | None = None,
        prepared: Prepared | None = None,
    ) -> None:
        """Through the domain's serve session: plan (on ``report``, the card as the app saw
        it, when given; none when handed ``prepared``), decide, start, ready, actuals. On a
        worker thread. ``replace``: stop an engine an earlier homelab left running (asked)."""
        session = None
        try:
            if stop_first and self.state.running.session is not None:
                backend.stop_engine(self.state.running.session)
                self.post_message(EngineStopped(released=False))
            default = entry.preset.workload if entry.preset is not None else None
            session = backend.serve_session(
                str(path),
                options,
                self._serve_event_arrived,
                default_workload=default,
                report=report,
                prepared=prepared,
                replace=replace,
            )
            supervisor = session.start()  # plan, decide (adopt / replace / refuse), start
            served = session.plan.plan if session.plan is not None else plan
            self._started(entry, session, supervisor, served, report, options, note)
            session.wait_ready()  # predicted vs actual and calibration follow as events
        except HomelabError as error:
            if session is None or not session.asked_to_stop:
                self.post_message(EngineFailed(error))

    run_engine = work(thread=True, exclusive=True, group="engine", exit_on_error=False)(serve)
    """:meth:`serve` on a worker thread (the start, switch and restart keys)."""

    def _started(
        self,
        entry: ModelEntry,
        session: ServeSession,
        supervisor: Supervisor,
        served: Plan | None,
        report: GpuReport | None = None,
        options: PlanOptions | None = None,
        note: str | None = None,
    ) -> None:
        """Tell the app, then follow the engine's log (its lines pushed, from now on)."""
        feed = LogFeed(supervisor, self.post_from_thread)
        running = Running(session, supervisor, entry, served, options, feed)
        self.post_message(EngineStarted(running, report, note))
        feed.start()

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def adopt_running(self, options: PlanOptions) -> None:
        """Adopt what an earlier homelab left running; the panel says "looking…" until this
        has looked (``s`` waits for it: it must not start beside, or silently adopt, it)."""
        try:
            self._adopt_left_running(options)
        finally:
            self.post_message(EngineLookedFor())

    def _adopt_left_running(self, options: PlanOptions) -> None:
        from homelab.gguf.file_name import quant_tag

        try:
            record = _left_running()
            if record is not None and record.keeper_alive():  # not ours: shown as kept
                self.post_message(EngineKept(record))
                return
            if record is None or record.supervised_by_other():
                return
            session = backend.adopt_engine(record, options, self._serve_event_arrived)
            supervisor = session.start()
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        path = Path(record.model)
        entry = ModelEntry(
            str(path), model_name(path, "dir"), quant_tag(path.name), "dir", path=path
        )
        self._started(entry, session, supervisor, None)

    @while_mounted
    def on_engine_looked_for(self, message: EngineLookedFor) -> None:
        self.state.looking = False
        self._show_engine()

    def _serve_event_arrived(self, event: object) -> None:
        """Called on the session's delivery thread: hand over, never block it."""
        from homelab.serve import events as ev

        if isinstance(event, ev.EngineChanged):
            self.post_message(EngineChanged(event.transition))
        elif isinstance(event, ev.Actuals | ev.GateStarted | ev.GateRetargeted | ev.Proved) or (
            isinstance(event, ev.Healing | ev.Healed | ev.PromptCacheOff)
        ):
            self.post_message(ServeEvent(event))  # the server panel's (ServerFlow)

    @while_mounted
    def on_engine_started(self, message: EngineStarted) -> None:
        if self.state.running.log_feed is not None:
            self.state.running.log_feed.close()
        self.state.running = running = message.running
        self.state.kept = None  # replaced, if one was kept
        assert running.supervisor is not None  # a started engine's
        self.state.health = Health(state=running.supervisor.state.value, note=message.note)
        self.query_one("#server", ServerPanel).clear_log()
        self._show_engine()
        self._show_card()

    @while_mounted
    def on_engine_stopped(self, message: EngineStopped) -> None:
        self.state.health.state = "stopped"
        self.state.health.ready_at = None
        self.state.running.plan = None
        self._show_engine()
        self._show_card()

    def action_stop(self) -> None:
        """``x``: stop the engine, once the person said yes (it kills the process)."""
        running = self.state.running
        if self.stop_kept():
            return
        if not self.state.engine_alive():
            self.notify("No engine is running.", title="Nothing to stop")
            return
        assert running.supervisor is not None
        name = running.entry.name if running.entry else "the engine"
        question = (
            f"Stop {name} (pid {running.supervisor.pid}{self.running_plan_bytes()})? "
            "Requests at its URL fail until s starts one again."
        )

        def answered(yes: bool | None) -> None:
            if yes and self.state.engine_alive():
                self.state.health.state = "stopping"  # on the panel now, not after the stop
                self._show_engine()
                self.stop_running()

        self.push_screen(ConfirmScreen(question, yes="Stop it"), answered)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def stop_running(self, then_exit: bool = False) -> None:
        session = self.state.running.session
        assert session is not None  # asked only while an engine of this app is alive
        try:
            backend.stop_engine(session)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
        self.post_message(EngineStopped(released=False))
        if then_exit:
            self.call_from_thread(self.exit, 0)

    def action_filter(self) -> None:
        self.query_one("#menu", ModelsMenu).open_filter()

    def action_focus_log(self) -> None:
        panel = self.query_one("#server", ServerPanel)
        if not panel.focus_search():
            self.notify(
                "The log is not on screen: make the terminal taller.", title="No log to search"
            )

    def action_copy_url(self) -> None:
        ready = self.state.engine_alive() and self.state.health.state == "ready"
        url = backend.public_url(self.state.running.session) if ready else None
        if url is None:
            self.notify("No engine is ready.", title="No URL")
            return
        self.copy_to_clipboard(url)  # OSC 52: terminals that honour it (not VTE, not tmux)
        tool = next((t for t in CLIPBOARD_TOOLS if shutil.which(t[0])), None)
        if tool is not None and (os.environ.get("WAYLAND_DISPLAY") or os.environ.get("DISPLAY")):
            subprocess.run(tool, input=url, text=True, timeout=2, check=False, capture_output=True)
        self.notify(f"Copied {url}", title="URL")

    def action_quit_app(self) -> None:
        running = self.state.running
        if isinstance(self.screen, QuitScreen):  # ctrl+q again, over its own question
            return
        if not self.state.engine_alive():
            self.exit(0)
            return
        assert running.supervisor is not None
        name = running.entry.name if running.entry else "An engine"
        what = f"{name} (pid {running.supervisor.pid})"

        def answered(choice: str | None) -> None:
            if choice == "stop":
                self.stop_running(then_exit=True)
            elif choice == "leave":
                self.leave_and_exit()

        self.push_screen(QuitScreen(what), answered)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def leave_and_exit(self) -> None:
        session = self.state.running.session
        assert session is not None  # asked only while an engine of this app is alive
        args, card = self.state.args, []
        if args.gpu_snapshot is not None:
            card = ["--gpu-snapshot", str(args.gpu_snapshot)]
        elif args.vram is not None:
            card = ["--vram", str(args.vram)]
        try:
            self.state.left_note = backend.leave_running(session, card)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        self.call_from_thread(self.exit, 0)

    def shutdown_engine(self) -> None:
        """After the app ended: stop an engine still supervised (never left orphaned unasked)."""
        supervisor, session = self.state.running.supervisor, self.state.running.session
        if session is None:
            return
        if self.state.running.log_feed is not None:
            self.state.running.log_feed.close()
        if supervisor is not None and not supervisor.released and not supervisor.wait_stopped(0):
            backend.stop_engine(session)
        else:
            session.close()


def _left_running() -> EngineRecord | None:
    """The live record of an engine homelab started (None: nothing runs, or it cannot be
    read: the session's own decision then says why)."""
    from homelab.engine.supervision.state_file import StateFile

    try:
        return StateFile().live()
    except HomelabError:
        return None
