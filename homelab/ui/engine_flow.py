"""The engine's controls: start, switch, stop, adopt, copy the URL, quit.

A mixin of :class:`homelab.ui.app.HomelabApp`. The engine is started detached, so
quitting may leave it running for the next ``homelab`` to adopt; supervisor transitions
arrive on the supervisor's thread and are handed over as messages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from textual import work
from textual.message import Message

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.log_feed import LogFeed
from homelab.ui.messages import (
    EngineChanged,
    EngineFailed,
    EngineStarted,
    EngineStopped,
    ServeEvent,
    while_mounted,
)
from homelab.ui.models_flow import model_name
from homelab.ui.screens import ConfirmScreen, QuitScreen
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.server import ServerPanel
from homelab.units import format_bytes

CLIPBOARD_TOOLS = (["wl-copy"], ["xclip", "-selection", "clipboard"], ["xsel", "-ib"])
"""Linux clipboards Textual's OSC 52 does not reach, tried in order."""


class EngineFlow:
    """Everything about the one engine this app runs or adopted."""

    query_one: Any
    post_message: Any
    notify: Any
    push_screen: Any
    call_from_thread: Any
    exit: Any
    copy_to_clipboard: Any
    port: int | None
    picked: ModelEntry | None
    plan: Any
    model_path: Path | None
    supervisor: Any
    session: Any
    actuals: Any
    report: Any
    running: ModelEntry | None
    running_plan: Any
    engine_state: str | None
    ready_at: float | None
    restarts: int
    engine_problem: HomelabError | None
    _show_card: Any
    _show_engine: Any
    plan_options: Any
    card_options: Any
    plan_picked: Any

    def _engine_init(self) -> None:
        self.engine_failure: Any = None
        """The last ``EngineFailure`` of this engine (kept, as "last crash", once ready again)."""
        self.failure_past = False
        self.gave_up = False
        self.crashes = 0
        self.engine_note: str | None = None
        self.running_options: Any = None
        self.log_feed: LogFeed | None = None

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
        try:
            options = self.plan_options()
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        if self.engine_alive():
            if self.running is not None and self.running.key == entry.key:
                self.notify(f"{entry.name} is already running.", title="Running")
                return
            frees = self.running_plan_bytes()
            question = (
                f"Stop {self.running.name if self.running else 'the running engine'} "
                f"(pid {self.supervisor.pid}{frees}) and start {entry.name}?"
            )

            report = self.report

            def answered(yes: bool | None) -> None:
                if yes:
                    self.run_engine(entry, plan, path, options, stop_first=True, report=report)

            self.push_screen(ConfirmScreen(question), answered)
            return
        self.run_engine(entry, plan, path, options, stop_first=False, report=self.report)

    def running_plan_bytes(self) -> str:
        plan = self.running_plan
        if plan is None:
            return ""
        held = plan.weights_on_device + plan.candidate.cost
        return f", frees about {format_bytes(held, precision=1)}"

    def serve(
        self,
        entry: ModelEntry,
        plan: Any,
        path: Path,
        options: Any,
        *,
        stop_first: bool,
        report: Any = None,
        note: str | None = None,
    ) -> None:
        """Through the domain's serve session: plan (on ``report``, the card as the app saw
        it, when given), decide, start, ready, actuals. On a worker thread."""
        session = None
        try:
            if stop_first and self.session is not None:
                backend.stop_engine(self.session)
                self.post_message(EngineStopped(released=False))
            default = entry.preset.workload if entry.preset is not None else None
            if report is None:
                session = backend.serve_session(
                    str(path), options, self._serve_event_arrived, default_workload=default
                )
            else:
                session = backend.serve_session_on(
                    str(path), options, report, self._serve_event_arrived, default_workload=default
                )
            supervisor = backend.start_engine(session)
            served = session.plan.plan if session.plan is not None else plan
            self._started(entry, session, supervisor, served, report, options, note)
            backend.wait_engine_ready(session)
        except HomelabError as error:
            if session is None or not session.asked_to_stop:
                self.post_message(EngineFailed(error))

    run_engine = work(thread=True, exclusive=True, group="engine", exit_on_error=False)(serve)
    """:meth:`serve` on a worker thread (the start, switch and restart keys)."""

    def _started(
        self,
        entry: ModelEntry,
        session: Any,
        supervisor: Any,
        served: Any,
        report: Any = None,
        options: Any = None,
        note: str | None = None,
    ) -> None:
        """Tell the app, then follow the engine's log (its lines pushed, from now on)."""
        feed = LogFeed(supervisor, self._post_log)
        started = EngineStarted(
            entry.key, (session, supervisor, entry, served), report, options, note, feed
        )
        self.post_message(started)
        feed.start()

    def _post_log(self, message: Message) -> None:
        try:
            self.post_message(message)
        except RuntimeError:  # the app's loop has closed (quit under way)
            pass

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def adopt_running(self, options: Any) -> None:
        try:
            record = backend.running_engine()
            if record is None or record.supervised_by_other():
                return
            session = backend.adopt_engine(record, options, self._serve_event_arrived)
            supervisor = backend.start_engine(session)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        path = Path(record.model)
        entry = ModelEntry(
            str(path), model_name(path, "dir"), backend.quant_of(path), "dir", path=path
        )
        self._started(entry, session, supervisor, None)

    def _serve_event_arrived(self, event: Any) -> None:
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
        self.session, self.supervisor, self.running, self.running_plan = message.supervisor
        self.running_options = message.options
        self.actuals = None
        self.engine_failure, self.failure_past, self.gave_up = None, False, False
        self.crashes = 0
        self.engine_note = message.note
        self.engine_state = self.supervisor.state.value
        self.restarts = 0
        self.ready_at = None
        if self.log_feed is not None:
            self.log_feed.close()
        self.log_feed = message.log_feed
        self.query_one("#server", ServerPanel).clear_log()
        self._show_engine()
        self._show_card()

    @while_mounted
    def on_engine_stopped(self, message: EngineStopped) -> None:
        self.engine_state = "stopped"
        self.ready_at = None
        self.running_plan = None
        self._show_engine()
        self._show_card()

    def action_stop(self) -> None:
        if not self.engine_alive():
            self.notify("No engine is running.", title="Nothing to stop")
            return
        self.stop_running()

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def stop_running(self, then_exit: bool = False) -> None:
        try:
            backend.stop_engine(self.session)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
        self.post_message(EngineStopped(released=False))
        if then_exit:
            self.call_from_thread(self.exit, 0)

    def action_filter(self) -> None:
        self.query_one("#menu", ModelsMenu).open_filter()

    def action_focus_log(self) -> None:
        self.query_one("#server", ServerPanel).focus_search()

    def action_copy_url(self) -> None:
        ready = self.engine_alive() and self.engine_state == "ready"
        url = backend.public_url(self.session) if ready else None
        if url is None:
            self.notify("No engine is ready.", title="No URL")
            return
        self.copy_to_clipboard(url)  # OSC 52: terminals that honour it (not VTE, not tmux)
        tool = next((t for t in CLIPBOARD_TOOLS if shutil.which(t[0])), None)
        if tool is not None and (os.environ.get("WAYLAND_DISPLAY") or os.environ.get("DISPLAY")):
            subprocess.run(tool, input=url, text=True, timeout=2, check=False, capture_output=True)
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
            backend.leave_running(self.session)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        self.call_from_thread(self.exit, 0)

    def shutdown_engine(self) -> None:
        """After the app ended: stop an engine still supervised (never left orphaned unasked)."""
        supervisor, session = self.supervisor, self.session
        if session is None:
            return
        if self.log_feed is not None:
            self.log_feed.close()
        if supervisor is not None and not supervisor.released and not supervisor.wait_stopped(0):
            backend.stop_engine(session)
        else:
            session.close()
