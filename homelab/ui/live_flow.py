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
from typing import TYPE_CHECKING

from textual import work
from textual.css.query import NoMatches
from textual.message import Message

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.flow import AppFlow
from homelab.ui.messages import (
    CardFailed,
    CardRead,
    EngineChanged,
    EngineStarted,
    EngineStopped,
    PlanMade,
    while_mounted,
)
from homelab.ui.replan_flow import EngineReplanned
from homelab.ui.widgets.card import CardPanel
from homelab.ui.widgets.metrics import MetricsPanel

if TYPE_CHECKING:
    from homelab.engine.llamacpp.client import LiveStatus
    from homelab.engine.llamacpp.reuse_alarm import Reprocessed, ReuseWatch
    from homelab.engine.llamacpp.status_poller import StatusPoller
    from homelab.gpu.report import GpuReport
    from homelab.gpu.telemetry import GpuSample, TelemetryPoller
    from homelab.plan.headroom import DesktopGrowth
    from homelab.plan.planner import Plan


@dataclass
class StatusRead(Message, bubble=False):
    """One look at the running llama-server (``LiveStatus``) and its prompt-cache alarm."""

    status: LiveStatus
    alarm: Reprocessed | None
    gate: list[str] | None = None
    """What the live panel says of the admission gate when one is in front."""


class LiveFlow(AppFlow):
    """The pollers and what they show (see the module docstring)."""

    def _live_init(self) -> None:
        self._live_lock = threading.Lock()
        self._live_closed = False
        self.gpu_poller: TelemetryPoller | None = None
        self.status_poller: StatusPoller | None = None
        self._status_url: str | None = None
        """The ready engine's URL the status poller asks (None: no poller)."""
        self._planned_on: list[tuple[Plan, GpuReport]] = []
        """The last plans (picked, running) and the report each was made on."""
        self._own_pid: int | None = None
        self.growth: DesktopGrowth | None = None

    # -- the card --------------------------------------------------------------------------

    def start_card(self) -> None:
        """Read the card once (no refresh, or a synthetic card), else follow its telemetry."""
        args = self.state.args
        if args.refresh_s <= 0 or args.vram is not None:
            self.probe_card()
        else:
            self.follow_card()

    @work(thread=True, exclusive=True, group="card", exit_on_error=False)
    def probe_card(self) -> None:
        from homelab.plan.card import card_for

        try:
            report = card_for(self.card_options())
        except HomelabError as error:
            self.post_message(CardFailed(error))
            return
        self._post_card(report)

    @work(thread=True, exclusive=True, group="telemetry", exit_on_error=False)
    def follow_card(self) -> None:
        from homelab.gpu.telemetry import TelemetryPoller

        try:
            args = self.state.args
            poller = TelemetryPoller(
                snapshot=args.gpu_snapshot, interval_s=args.refresh_s, clock=args.telemetry_clock
            )
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

    def _on_gpu_sample(self, poller: TelemetryPoller, sample: GpuSample) -> None:
        """On the subscription's thread: the budgets (pure), then hand the sample over."""
        if sample.final and poller.failure is not None:
            self.post_from_thread(CardFailed(poller.failure))
            return
        self._post_card(sample.report)

    def _post_card(self, report: GpuReport) -> None:
        """Any thread: the report with one budget per card, handed to the app."""
        from homelab.plan.budget import device_budget

        try:
            indexes: list[int | None] = [d.index for d in report.devices] or [None]
            budgets = [device_budget(report, i) for i in indexes]
        except HomelabError as error:
            self.post_from_thread(CardFailed(error))
            return
        self.post_from_thread(CardRead(report, budgets))

    @while_mounted
    def on_card_read(self, message: CardRead) -> None:
        """After the app's own handler drew the card: own pids, and the growth warning."""
        supervisor = self.state.running.supervisor
        pid = supervisor.pid if supervisor is not None else None
        poller = self.gpu_poller
        if poller is not None and pid != self._own_pid:
            self._own_pid = pid
            poller.set_own_pids(frozenset({pid}) if pid else frozenset())
        self._show_growth()

    # -- the growth warning ----------------------------------------------------------------

    @while_mounted
    def on_plan_made(self, message: PlanMade) -> None:
        """Remember the report each plan was made on (to tell which process grew since)."""
        report = self.state.card.report
        if message.plan is not None and report is not None:
            self._planned_on = [*self._planned_on[-3:], (message.plan, report)]
        self._show_growth()

    def _show_growth(self) -> None:
        from homelab.plan.headroom import desktop_growth

        running_plan, report = self.state.running.plan, self.state.card.report
        plan = running_plan or self.state.picked.plan
        growth = None
        if plan is not None and report is not None:
            planned_on = next((r for p, r in self._planned_on if p is plan), None)
            growth = desktop_growth(plan.budget, report, planned_on)
        self.growth = growth
        self.query_one("#card", CardPanel).show_growth(growth, running_plan is not None)

    # -- the engine's metrics --------------------------------------------------------------

    @while_mounted
    def on_engine_started(self, message: EngineStarted) -> None:
        """After the engine flow took it: the report its plan was made on, and the metrics."""
        self._planned(self.state.running.plan, message.planned_on)

    @while_mounted
    def on_engine_replanned(self, message: EngineReplanned) -> None:
        """After the re-plan flow took it: a new engine behind the same URL (fresh counters)."""
        if message.plan is None:
            return
        self._status_url = None
        self._planned(message.plan, message.planned_on)

    def _planned(self, plan: Plan | None, planned_on: GpuReport | None) -> None:
        """The running engine's plan is ``plan``, made on ``planned_on``: the growth warning
        follows it, and the metrics follow the engine."""
        if plan is not None and planned_on is not None:
            self._planned_on = [*self._planned_on[-3:], (plan, planned_on)]
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
        url, supervisor = None, self.state.running.supervisor
        if supervisor is not None and self.state.health.state == "ready":
            url = supervisor.url
        if url == self._status_url:
            return
        self._status_url = url
        key = None if supervisor is None else supervisor.spec.api_key  # the engine's own
        self.swap_status_poller(url, key)
        if url is None:
            try:
                self.query_one("#metrics", MetricsPanel).clear()
            except NoMatches:  # the panel is gone: the app is closing
                pass

    @work(thread=True, exclusive=False, group="status", exit_on_error=False)
    def swap_status_poller(self, url: str | None, key: str | None = None) -> None:
        from homelab.engine.llamacpp.reuse_alarm import ReuseWatch
        from homelab.engine.llamacpp.status_poller import StatusPoller

        with self._live_lock:
            old, self.status_poller = self.status_poller, None
        if old is not None:
            old.stop()
        if url is None:
            return
        poller = StatusPoller(lambda: url, interval_s=self.state.args.refresh_s or 1.0, api_key=key)
        watch = ReuseWatch()  # one per engine life: its cache, its alarm
        poller.subscribe(lambda status: self._on_status(watch, status))
        poller.start()
        with self._live_lock:
            keep = not self._live_closed and self._status_url == url
            if keep:
                self.status_poller = poller
        if not keep:  # quit, or the engine moved on, while it started
            poller.stop()

    def _on_status(self, watch: ReuseWatch, status: LiveStatus) -> None:
        """On the subscription's thread: the alarm rule (pure), the gate's numbers (one
        loopback call when a gate is in front), then hand them over."""
        gate = backend.gate_lines(self.state.running.session)
        self.post_from_thread(StatusRead(status, watch.update(status), gate))

    @while_mounted
    def on_status_read(self, message: StatusRead) -> None:
        if self._status_url is None or message.status.url != self._status_url.rstrip("/"):
            return  # a reading of an engine that is gone
        self.query_one("#metrics", MetricsPanel).show(message.status, message.alarm, message.gate)
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
        feed = self.state.running.log_feed
        if feed is not None:  # the engine's pushed log: unsubscribed with the rest
            feed.close()
