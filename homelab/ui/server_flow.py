"""The server panel's view of the engine: its state, crashes, restarts and pushed log.

A mixin of :class:`homelab.ui.app.HomelabApp`. When an engine becomes ready the agent
contract check (:mod:`homelab.agents.contract`) runs through its URL, once per URL and
model, and its line shows next to the URL (the palette's "Check the agents" runs it again). Supervisor transitions arrive as
:class:`~homelab.ui.messages.EngineChanged` (from the serve session's thread), the log
as :class:`~homelab.ui.log_feed.LogArrived` (from the supervisor's event hub). A crash
keeps the engine's own explained failure (``EngineFailure``: title, what happened, the
engine's own lines, the next step) on the panel while it restarts, and as "last crash"
once it is ready again; when the supervisor stops restarting (a crash loop, or a failure
that would repeat) the state reads "gave up" with the supervisor's reason.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from textual import work

from homelab.engine.supervision.states import State, Transition
from homelab.errors import HomelabError
from homelab.serve import events as ev
from homelab.serve.describe import describe
from homelab.ui import backend
from homelab.ui.flow import AppFlow
from homelab.ui.log_feed import LogArrived
from homelab.ui.messages import (
    AgentContract,
    EngineBackend,
    EngineChanged,
    EngineFailed,
    EngineMissing,
    ServeEvent,
    while_mounted,
)
from homelab.ui.widgets.server import ServerPanel

if TYPE_CHECKING:
    from homelab.serve.session import ServeSession


GATE_OPENING = "opening the gate"
"""The state shown while the engine is ready but the gate in front of it does not listen
yet: "ready" is said only once the URL shown answers."""


class ServerFlow(AppFlow):
    """What the server panel shows of the engine (see the module docstring)."""

    @while_mounted
    def on_serve_event(self, message: ServeEvent) -> None:
        event = message.event
        if isinstance(event, ev.Actuals):
            self.state.health.actuals = event.measured
        elif isinstance(event, ev.GateStarted):  # the gate listens: its URL is the one to use
            running = self.state.running.entry
            name = running.name if running else "engine"
            self.notify(f"{name} is ready at {event.url}")
            if self.state.args.check_agents and self.state.health.state == "ready":
                self._check_agents_once(event.url)
        elif isinstance(event, ev.GateRetargeted):  # a heal's or a re-plan's new limits
            self.notify(describe(event).line or "", title="gate")
        elif (note := describe(event).line) is not None:  # the launch proof, a heal
            self.state.health.note = note
            self.notify(note.splitlines()[0], title="launch")
        self._show_engine()

    @while_mounted
    def on_log_arrived(self, message: LogArrived) -> None:
        lines = message.feed.take()
        if message.feed is self.state.running.log_feed:
            self.query_one("#server", ServerPanel).append_log(lines)

    @while_mounted
    def on_engine_changed(self, message: EngineChanged) -> None:
        transition, health, running = message.transition, self.state.health, self.state.running
        if running.supervisor is None:
            return
        health.state = transition.state.value
        if transition.state.value == "ready":
            health.ready_at = transition.monotonic
        elif transition.state.value == "restarting":
            health.restarts += 0 if _planned_restart(transition) else 1
            health.ready_at = None
        elif transition.state.value == "stopped":
            health.ready_at = None
        if transition.state.value == "crashed":
            health.crashes += 1
        if transition.failure is not None:
            health.failure, health.failure_past = transition.failure, False
            health.gave_up = transition.state.value == "stopped"  # the supervisor stopped trying
        elif transition.state.value == "ready" and health.failure is not None:
            health.failure_past = True  # back: the crash stays on the panel as "last crash"
        if transition.state.value != "ready":
            self.state.agent_contract = None
        self._show_engine()
        url = backend.public_url(running.session)  # the gate's, in front of the engine
        if transition.state.value == "ready" and url:
            self.notify(f"{running.entry.name if running.entry else 'engine'} is ready at {url}")
            if self.state.args.check_agents:
                self._check_agents_once(url)

    def _check_agents_once(self, url: str) -> None:
        """The check on its own when an engine becomes ready, once per URL and model: what
        the agents will meet is on the panel before anyone hands one off (a restart or a
        re-plan of the same model shows the line it had)."""
        checked = (url, self._model_key())
        known = self.state.agent_contracts.get(checked)
        if known is not None:
            self.state.agent_contract = known
            self._show_engine()
            return
        self.state.agent_contract = "checking…"
        self._show_engine()
        self.check_agent_contract(url, checked)

    def _model_key(self) -> str:
        entry = self.state.running.entry
        if entry is None:
            return ""
        return str(entry.path) if entry.path is not None else entry.key

    def action_check_agents(self) -> None:
        """Run the agent contract check through the ready engine's URL (the palette's "Check
        the agents"; it also runs on its own once per engine and model, see ``check_agents``)."""
        ready = self.state.engine_alive() and self.state.health.state == "ready"
        url = backend.public_url(self.state.running.session) if ready else None
        if url is None:
            self.notify("No engine is ready.", title="Agents")
            return
        self.state.agent_contract = "checking…"
        self._show_engine()
        self.check_agent_contract(url, (url, self._model_key()))

    @work(thread=True, exclusive=True, group="agent-contract", exit_on_error=False)
    def check_agent_contract(self, url: str, checked: tuple[str, str]) -> None:
        """One short probe of each route the agents speak, through the URL they get."""
        from homelab.agents.contract import check_served, summary
        from homelab.gate.key_file import stored_key

        try:
            words: str | None = summary(check_served(url, stored_key()))
        except HomelabError as error:
            words = f"not checked ({error.message})"
        self.post_message(AgentContract(words, checked))

    @while_mounted
    def on_agent_contract(self, message: AgentContract) -> None:
        if self.state.health.state != "ready":
            return  # it stopped or restarts meanwhile: the next ready checks again
        url = backend.public_url(self.state.running.session)
        if message.checked != (url, self._model_key()):
            return  # another engine (a switch) answers now: its own check is under way
        self.state.agent_contract = message.words
        words = message.words or ""
        if message.words is not None and not words.startswith("not checked"):
            self.state.agent_contracts[message.checked] = message.words
        self._show_engine()
        self.notify(words, title="Agents")

    @while_mounted
    def on_engine_failed(self, message: EngineFailed) -> None:
        error = message.error
        text = error.message + (f"\n{error.hint}" if error.hint else "")
        self.notify(text, title=error.title, severity="error", timeout=15)

    def _show_engine(self) -> None:
        panel = self.query_one("#server", ServerPanel)
        health, running = self.state.health, self.state.running
        if running.supervisor is None and self.state.served_set is not None:
            panel.show_set(self.state.served_set)
            return
        if running.supervisor is None and self.show_kept(panel):
            return
        if running.supervisor is None:
            problem = self.state.engine_problem
            words = None
            if problem is not None:
                words = f"{problem.title}: {problem.message}" + (
                    f"\n{problem.hint}" if problem.hint else ""
                )
            panel.show_state(None, None, None, 0, words, looking=self.state.looking)
            return
        uptime = None
        if health.ready_at is not None:
            uptime = _duration(time.monotonic() - health.ready_at)
        url = backend.public_url(running.session) if health.state == "ready" else None
        name = running.entry.name if running.entry else None
        state = health.state
        if state == "stopped" and health.gave_up:  # stopped on its own: said how below
            state = "gave up" if health.crashes else "failed"
        elif state == "ready" and url is None:  # the engine answers; its gate not yet
            state = GATE_OPENING
        panel.show_state(
            state,
            url,
            uptime,
            health.restarts,
            None,
            name,
            failure=health.failure,
            failure_past=health.failure_past,
            note=health.note,
            backend=self.state.engine_backend,
            verdict=_verdict(running.session),
            contract=self.state.agent_contract,
        )
        actuals = health.actuals if health.state != "stopped" else None
        panel.show_actuals(actuals.rows if actuals is not None else None)  # room for the failure

    @work(thread=True, exclusive=True, group="engine-check", exit_on_error=False)
    def check_engine(self) -> None:
        """Say at once when there is no llama-server to run, or (where a card is, live or
        replayed) one without a GPU backend, and how to get one."""
        from homelab.engine.llamacpp.backend import backend_of, check_gpu_backend
        from homelab.engine.llamacpp.cuda_build import nvidia_driver_present
        from homelab.engine.llamacpp.locate import find_llama_server
        from homelab.gpu.probe import probe

        try:
            path = find_llama_server()
            found = backend_of(path)
            self.post_message(EngineBackend(None if found is None else found.describe()))
            snapshot = self.state.args.gpu_snapshot
            if snapshot is not None or nvidia_driver_present():
                card = self.state.card.report
                with contextlib.suppress(HomelabError):  # the card panel says what NVML did
                    card = card or probe(snapshot=snapshot, window_s=0.0)
                if card is not None and card.devices:
                    check_gpu_backend(path)
        except HomelabError as error:
            self.post_message(EngineMissing(error))

    @while_mounted
    def on_engine_backend(self, message: EngineBackend) -> None:
        self.state.engine_backend = message.words
        self._show_engine()

    @while_mounted
    def on_engine_missing(self, message: EngineMissing) -> None:
        self.state.engine_problem = message.error
        self._show_engine()


def _verdict(session: ServeSession | None) -> str | None:
    """The running llama.cpp plan's verdict in words (None: adopted, or another engine's)."""
    from homelab.plan.planner import Plan
    from homelab.ui.catalog import plan_words

    served = session.plan if session is not None else None
    if served is None or not isinstance(served.plan, Plan):
        return None
    return plan_words(served.plan)[0]


def _planned_restart(transition: Transition) -> bool:
    """True for a restart the supervisor was asked for (into a re-planned or healed spec),
    not one after a crash (which comes after a CRASHED transition)."""
    return transition.state is State.RESTARTING and transition.previous is not State.CRASHED


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
