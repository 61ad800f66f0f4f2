"""The server panel's side of the app: start, switch, stop, restart, adopt, copy, quit.

A mixin of :class:`homelab.ui.app.HomelabApp`. The engine is started detached, so
quitting may leave it running for the next ``homelab`` to adopt; supervisor transitions
arrive on the supervisor's thread and are handed over as messages.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from textual import work

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.messages import (
    EngineChanged,
    EngineFailed,
    EngineMissing,
    EngineStarted,
    EngineStopped,
    ServeEvent,
    while_mounted,
)
from homelab.ui.models_flow import model_name
from homelab.ui.screens import ConfirmScreen, QuitScreen
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.server import ServerPanel, failure_text
from homelab.units import format_bytes

LOG_TAIL = 200
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
    engine_detail: str | None
    running: ModelEntry | None
    running_plan: Any
    engine_state: str | None
    ready_at: float | None
    restarts: int
    engine_problem: HomelabError | None
    _show_card: Any
    plan_options: Any
    card_options: Any
    plan_picked: Any

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

            def answered(yes: bool | None) -> None:
                if yes:
                    self.run_engine(entry, plan, path, options, stop_first=True)

            self.push_screen(ConfirmScreen(question), answered)
            return
        self.run_engine(entry, plan, path, options, stop_first=False)

    def running_plan_bytes(self) -> str:
        plan = self.running_plan
        if plan is None:
            return ""
        held = plan.weights_on_device + plan.candidate.cost
        return f", frees about {format_bytes(held, precision=1)}"

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def run_engine(
        self, entry: ModelEntry, plan: Any, path: Path, options: Any, *, stop_first: bool
    ) -> None:
        """Through the domain's serve session: plan, decide, start, ready, actuals."""
        session = None
        try:
            if stop_first and self.session is not None:
                backend.stop_engine(self.session)
                self.post_message(EngineStopped(released=False))
            default = entry.preset.workload if entry.preset is not None else None
            session = backend.serve_session(
                str(path), options, self._serve_event_arrived, default_workload=default
            )
            supervisor = backend.start_engine(session)
            served = session.plan.plan if session.plan is not None else plan
            self.post_message(EngineStarted(entry.key, (session, supervisor, entry, served)))
            backend.wait_engine_ready(session)
        except HomelabError as error:
            if session is None or not session.asked_to_stop:
                self.post_message(EngineFailed(error))

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
        self.post_message(EngineStarted(entry.key, (session, supervisor, entry, None)))

    def _serve_event_arrived(self, event: Any) -> None:
        """Called on the session's delivery thread: hand over, never block it."""
        from homelab.engine.session import events as ev

        if isinstance(event, ev.EngineChanged):
            self.post_message(EngineChanged(event.transition))
        elif isinstance(event, ev.Actuals | ev.GateStarted):
            self.post_message(ServeEvent(event))

    @while_mounted
    def on_serve_event(self, message: ServeEvent) -> None:
        measured = getattr(message.event, "measured", None)
        if measured is not None:
            self.actuals = measured
        else:  # the gate listens: its URL is the one to use
            name = self.running.name if self.running else "engine"
            self.notify(f"{name} is ready at {message.event.url}")
        self._show_engine()

    @while_mounted
    def on_engine_started(self, message: EngineStarted) -> None:
        self.session, self.supervisor, self.running, self.running_plan = message.supervisor
        self.actuals = None
        self.engine_detail = None
        self.engine_state = self.supervisor.state.value
        self.restarts = 0
        self.ready_at = None
        self.query_one("#server", ServerPanel).clear_log()
        self._show_engine()
        self._show_card()

    @while_mounted
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
        failure = failure_text(transition.failure)
        if failure is not None:
            self.engine_detail = failure  # the engine's own error stays until it is ready
        elif transition.state.value == "ready":
            self.engine_detail = None
        self._show_engine()
        url = backend.public_url(self.session)  # the gate's, in front of the engine
        if transition.state.value == "ready" and url:
            self.notify(f"{self.running.name if self.running else 'engine'} is ready at {url}")

    @while_mounted
    def on_engine_stopped(self, message: EngineStopped) -> None:
        self.engine_state = "stopped"
        self.ready_at = None
        self.running_plan = None
        self._show_engine()
        self._show_card()

    @while_mounted
    def on_engine_failed(self, message: EngineFailed) -> None:
        error = message.error
        text = error.message + (f"\n{error.hint}" if error.hint else "")
        self.notify(text, title=error.title, severity="error", timeout=15)

    def _show_engine(self, detail: str | None = None) -> None:
        detail = detail or getattr(self, "engine_detail", None)
        panel = self.query_one("#server", ServerPanel)
        if self.supervisor is None:
            problem = self.engine_problem
            words = None
            if problem is not None:
                words = f"{problem.title}: {problem.message}" + (
                    f"\n{problem.hint}" if problem.hint else ""
                )
            panel.show_state(None, None, None, 0, words)
            return
        uptime = None
        if self.ready_at is not None:
            uptime = _duration(time.monotonic() - self.ready_at)
        url = backend.public_url(self.session) if self.engine_state == "ready" else None
        name = self.running.name if self.running else None
        panel.show_state(self.engine_state, url, uptime, self.restarts, detail, name)
        panel.show_log(backend.engine_log(self.supervisor, LOG_TAIL))
        panel.show_actuals(self.actuals.rows if self.actuals is not None else None)

    @work(thread=True, exclusive=True, group="engine-check", exit_on_error=False)
    def check_engine(self) -> None:
        """Say at once when there is no llama-server to run (and how to get one)."""
        try:
            backend.engine_binary()
        except HomelabError as error:
            self.post_message(EngineMissing(error))

    @while_mounted
    def on_engine_missing(self, message: EngineMissing) -> None:
        self.engine_problem = message.error
        self._show_engine()

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

    def action_restart(self) -> None:
        if not self.engine_alive() or self.running is None or self.running_plan is None:
            self.notify("No engine of this session to restart.", title="Nothing to restart")
            return
        try:
            options = self.plan_options()
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            return
        self.run_engine(
            self.running,
            self.running_plan,
            Path(self.supervisor.spec.model),
            options,
            stop_first=True,
        )

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
        if supervisor is not None and not supervisor.released and not supervisor.wait_stopped(0):
            backend.stop_engine(session)
        else:
            session.close()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
