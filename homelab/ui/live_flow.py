"""The live side of the app: GPU telemetry for the card, the growth warning, engine metrics.

A mixin of :class:`homelab.ui.app.HomelabApp`. With a refresh interval, the card panel
follows the domain's :class:`~homelab.gpu.telemetry.TelemetryPoller` (NVML opened once, a
sample about every second; a replayed snapshot plays its samples at their recorded
times): the poller is started in a worker once the first frame is up, and each sample
is handed to the app as a :class:`~homelab.ui.messages.CardRead` from the subscription's
own thread (``post_message`` is thread-safe; no widget is touched there). With
``refresh_s=0`` (snapshot tests) or a synthetic ``--vram`` card the card is read exactly
once and no poller runs.

While an engine of this app is ready, a :class:`~homelab.engine.llamacpp.status_poller.StatusPoller`
asks it for its counters about once a second and the metrics panel shows them. It is
started on the engine-state messages (ready) and stopped when the engine stops,
restarts or is replaced. Both pollers are stopped, their threads joined, when the app
unmounts, so quitting with them running never raises.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from textual import work
from textual.css.query import NoMatches
from textual.message import Message

from homelab.errors import HomelabError
from homelab.ui import backend, backend_gate
from homelab.ui.messages import (
    CardFailed,
    CardRead,
    EngineChanged,
    EngineStarted,
    EngineStopped,
    PlanMade,
    while_mounted,
)
from homelab.ui.widgets.card import CardPanel
from homelab.ui.widgets.metrics import MetricsPanel


@dataclass
class StatusRead(Message, bubble=False):
    """One look at the running llama-server (``LiveStatus``) and its prompt-cache alarm."""

    status: Any
    alarm: Any
    gate: dict[str, Any] | None = None
    """The admission gate's state (``GateState.to_json``) when one is in front."""


def _post(app: Any, message: Message) -> None:
    """Hand a message over from a poller's thread; an app that has closed just drops it."""
    try:
        app.post_message(message)
    except RuntimeError:  # the event loop is already closed (quit under way)
        pass


class LiveFlow:
    """The pollers and what they show (see the module docstring)."""

    query_one: Any
    post_message: Any
    gpu_snapshot: Path | None
    vram: int | None
    refresh_s: float
    report: Any
    plan: Any
    running_plan: Any
    supervisor: Any
    engine_state: str | None
    telemetry_clock: Any
    probe_card: Any
    _show_engine: Any

    def _live_init(self) -> None:
        self._live_lock = threading.Lock()
        self._live_closed = False
        self.gpu_poller: Any = None
        self.status_poller: Any = None
        self._status_url: str | None = None
        self._planned_on: list[tuple[Any, Any]] = []
        self._own_pid: int | None = None
        self.growth: Any = None

    # -- the card --------------------------------------------------------------------------

    def start_card(self) -> None:
        """Read the card once (no refresh, or a synthetic card), else follow its telemetry."""
        if self.refresh_s <= 0 or self.vram is not None:
            self.probe_card()
        else:
            self.follow_card()

    @work(thread=True, exclusive=True, group="telemetry", exit_on_error=False)
    def follow_card(self) -> None:
        try:
            poller = backend.gpu_poller(self.gpu_snapshot, self.refresh_s, self.telemetry_clock)
            poller.subscribe(lambda sample: self._on_gpu_sample(poller, sample))
            first = poller.start()
        except HomelabError as error:
            self.post_message(CardFailed(error))
            return
        with self._live_lock:
            if self._live_closed:  # quit while the poller started: stop it here
                poller.stop()
                return
            self.gpu_poller = poller
        self._on_gpu_sample(poller, first)

    def _on_gpu_sample(self, poller: Any, sample: Any) -> None:
        """On the subscription's thread: the budgets (pure), then hand the sample over."""
        report = sample.report
        if sample.final and poller.failure is not None:
            _post(self, CardFailed(poller.failure))
            return
        try:
            indexes: list[int | None] = [d.index for d in report.devices] or [None]
            budgets = [backend.device_budget(report, i) for i in indexes]
        except HomelabError as error:
            _post(self, CardFailed(error))
            return
        _post(self, CardRead(report, budgets))

    @while_mounted
    def on_card_read(self, message: CardRead) -> None:
        """After the app's own handler drew the card: own pids, and the growth warning."""
        pid = self.supervisor.pid if self.supervisor is not None else None
        poller = self.gpu_poller
        if poller is not None and pid != self._own_pid:
            self._own_pid = pid
            poller.set_own_pids(frozenset({pid}) if pid else frozenset())
        self._show_growth()

    # -- the growth warning ----------------------------------------------------------------

    @while_mounted
    def on_plan_made(self, message: PlanMade) -> None:
        """Remember the report each plan was made on (to tell which process grew since)."""
        if message.plan is not None and self.report is not None:
            self._planned_on = [*self._planned_on[-3:], (message.plan, self.report)]
        self._show_growth()

    def _show_growth(self) -> None:
        plan = self.running_plan or self.plan
        growth = None
        if plan is not None and self.report is not None:
            planned_on = next((r for p, r in self._planned_on if p is plan), None)
            growth = backend.desktop_growth(plan.budget, self.report, planned_on)
        self.growth = growth
        self.query_one("#card", CardPanel).show_growth(growth, self.running_plan is not None)

    # -- the engine's metrics --------------------------------------------------------------

    @while_mounted
    def on_engine_started(self, message: EngineStarted) -> None:
        """After the engine flow took it: the report its plan was made on, and the metrics."""
        if self.running_plan is not None and message.planned_on is not None:
            self._planned_on = [*self._planned_on[-3:], (self.running_plan, message.planned_on)]
        self._sync_status()
        self._show_growth()  # the warning follows the plan now running

    def on_engine_changed(self, message: EngineChanged) -> None:
        self._sync_status()

    @while_mounted
    def on_engine_stopped(self, message: EngineStopped) -> None:
        self._sync_status()
        self._show_growth()

    def _sync_status(self) -> None:
        """A status poller exactly while an engine is ready (a new one for a new URL)."""
        url = None
        if self.supervisor is not None and self.engine_state == "ready":
            url = self.supervisor.url
        if url == self._status_url:
            return
        self._status_url = url
        self.swap_status_poller(url)
        if url is None:
            try:
                self.query_one("#metrics", MetricsPanel).clear()
            except NoMatches:  # the panel is gone: the app is closing
                pass

    @work(thread=True, exclusive=False, group="status", exit_on_error=False)
    def swap_status_poller(self, url: str | None) -> None:
        with self._live_lock:
            old, self.status_poller = self.status_poller, None
        if old is not None:
            old.stop()
        if url is None:
            return
        poller: Any = backend.status_poller(lambda: url, self.refresh_s or 1.0)
        watch = backend.reuse_watch()  # one per engine life: its cache, its alarm
        poller.subscribe(lambda status: self._on_status(watch, status))
        poller.start()
        with self._live_lock:
            keep = not self._live_closed and self._status_url == url
            if keep:
                self.status_poller = poller
        if not keep:  # quit, or the engine moved on, while it started
            poller.stop()

    def _on_status(self, watch: Any, status: Any) -> None:
        """On the subscription's thread: the alarm rule (pure), the gate's numbers (one
        loopback call when a gate is in front), then hand them over."""
        gate = backend_gate.gate_state(getattr(self, "session", None))
        _post(self, StatusRead(status, watch.update(status), gate))

    @while_mounted
    def on_status_read(self, message: StatusRead) -> None:
        if self._status_url is None or message.status.url != self._status_url.rstrip("/"):
            return  # a reading of an engine that is gone
        gate = None if message.gate is None else backend_gate.gate_lines(message.gate)
        self.query_one("#metrics", MetricsPanel).show(message.status, message.alarm, gate)
        self._show_engine()  # uptime and log tail, also once a replayed card has ended

    # -- the end ---------------------------------------------------------------------------

    def stop_live(self) -> None:
        """Stop both pollers and join their threads, and close the log feed (idempotent; on
        unmount)."""
        with self._live_lock:
            self._live_closed = True
            pollers = [self.gpu_poller, self.status_poller]
            self.gpu_poller = self.status_poller = None
        for poller in pollers:
            if poller is not None:
                poller.stop()
        feed = getattr(self, "log_feed", None)
        if feed is not None:  # the engine's pushed log: unsubscribed with the rest
            feed.close()
