"""The server panel's view of the engine: its state, crashes, restarts and pushed log.

A mixin of :class:`homelab.ui.app.HomelabApp`. Supervisor transitions arrive as
:class:`~homelab.ui.messages.EngineChanged` (from the serve session's thread), the log
as :class:`~homelab.ui.log_feed.LogArrived` (from the supervisor's event hub). A crash
keeps the engine's own explained failure (``EngineFailure``: title, what happened, the
engine's own lines, the next step) on the panel while it restarts, and as "last crash"
once it is ready again; when the supervisor stops restarting (a crash loop, or a failure
that would repeat) the state reads "gave up" with the supervisor's reason.
"""

from __future__ import annotations

import time
from typing import Any

from textual import work

from homelab.errors import HomelabError
from homelab.serve import events as ev
from homelab.serve.describe import describe
from homelab.ui import backend, backend_replan
from homelab.ui.log_feed import LogArrived
from homelab.ui.messages import (
    EngineChanged,
    EngineFailed,
    EngineMissing,
    ServeEvent,
    while_mounted,
)
from homelab.ui.widgets.server import ServerPanel


class ServerFlow:
    """What the server panel shows of the engine (see the module docstring)."""

    query_one: Any
    post_message: Any
    notify: Any
    supervisor: Any
    session: Any
    running: Any
    actuals: Any
    engine_state: str | None
    ready_at: float | None
    restarts: int
    crashes: int
    engine_problem: HomelabError | None
    engine_failure: Any
    failure_past: bool
    gave_up: bool
    engine_note: str | None
    log_feed: Any

    @while_mounted
    def on_serve_event(self, message: ServeEvent) -> None:
        event = message.event
        if isinstance(event, ev.Actuals):
            self.actuals = event.measured
        elif isinstance(event, ev.GateStarted):  # the gate listens: its URL is the one to use
            name = self.running.name if self.running else "engine"
            self.notify(f"{name} is ready at {event.url}")
        elif isinstance(event, ev.GateRetargeted):  # a heal's or a re-plan's new limits
            self.notify(describe(event).line or "", title="gate")
        elif (note := describe(event).line) is not None:  # the launch proof, a heal
            self.engine_note = note
            self.notify(note.splitlines()[0], title="launch")
        self._show_engine()

    @while_mounted
    def on_log_arrived(self, message: LogArrived) -> None:
        lines = message.feed.take()
        if message.feed is self.log_feed:
            self.query_one("#server", ServerPanel).append_log(lines)

    @while_mounted
    def on_engine_changed(self, message: EngineChanged) -> None:
        transition = message.transition
        if self.supervisor is None:
            return
        self.engine_state = transition.state.value
        if transition.state.value == "ready":
            self.ready_at = transition.monotonic
        elif transition.state.value == "restarting":
            self.restarts += 0 if backend_replan.planned_restart(transition) else 1
            self.ready_at = None
        elif transition.state.value == "stopped":
            self.ready_at = None
        if transition.state.value == "crashed":
            self.crashes += 1
        if transition.failure is not None:
            self.engine_failure, self.failure_past = transition.failure, False
            self.gave_up = transition.state.value == "stopped"  # the supervisor stopped trying
        elif transition.state.value == "ready" and self.engine_failure is not None:
            self.failure_past = True  # back: the crash stays on the panel as "last crash"
        self._show_engine()
        url = backend.public_url(self.session)  # the gate's, in front of the engine
        if transition.state.value == "ready" and url:
            self.notify(f"{self.running.name if self.running else 'engine'} is ready at {url}")

    @while_mounted
    def on_engine_failed(self, message: EngineFailed) -> None:
        error = message.error
        text = error.message + (f"\n{error.hint}" if error.hint else "")
        self.notify(text, title=error.title, severity="error", timeout=15)

    def _show_engine(self) -> None:
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
        state = self.engine_state
        if state == "stopped" and self.gave_up:  # stopped on its own: said how below
            state = "gave up" if self.crashes else "failed"
        panel.show_state(
            state,
            url,
            uptime,
            self.restarts,
            None,
            name,
            failure=self.engine_failure,
            failure_past=self.failure_past,
            note=self.engine_note,
        )
        running = self.actuals is not None and self.engine_state != "stopped"
        panel.show_actuals(self.actuals.rows if running else None)  # room for the failure

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


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
