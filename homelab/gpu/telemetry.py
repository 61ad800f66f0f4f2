"""A long-lived GPU telemetry poller: NVML opened once, a sample about every second, to subscribers.

:class:`TelemetryPoller` initialises NVML once for its whole life (``start`` → ``stop``),
samples every card every ``interval_s`` seconds through the same
:class:`~homelab.gpu.session.CardSession` as the one-shot probe, and publishes each
sample as a frozen :class:`GpuSample`: the cards now (memory, per-process usage), the
lowest free and the desktop's peak over the last ``window_s`` seconds (a sliding
window), and the lowest free since the poller started. Subscribers get samples on their
own threads (:mod:`homelab.events`): a slow one never delays the sampling.

With a snapshot the backend is :class:`~homelab.gpu.replay.ReplayNvml` and the recorded
samples are played at their recorded times (``t``), raising pynvml's real errors where
the recording holds them; the poller ends after the last one. A clock that moves only
when told (a test's) decides when each sample is taken.

Without a usable driver (no library, no card) there is nothing to initialise: samples
are system-RAM reports, like the probe's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homelab.errors import GpuProbeError
from homelab.events import EventHub, Subscription
from homelab.gpu.cpu import cpu_report
from homelab.gpu.nvml import NvmlBackend, RealNvml
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.report import GpuReport, ReportSource
from homelab.gpu.session import CardSession, open_session
from homelab.polling import Clock, PollThread, Schedule, every

INTERVAL_S = 1.0
WINDOW_S = 60.0
"""How far back the desktop's peak and the window's lowest free look."""


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One sample of every card, with the window's worst moments."""

    seq: int
    """0 for the first sample of the poller, then 1, 2, ..."""
    at: float
    """Seconds since the poller started (for a replay: since the recording's first sample)."""
    report: GpuReport
    """The cards over the window: last values and processes, ``free_min`` (lowest free) and
    ``desktop_peak`` over the samples of the last ``window_s`` seconds (``samples``, and
    ``report.window_s`` is the span they cover). A CPU report when there is no card."""
    lowest_free: tuple[int | None, ...]
    """Per card of ``report.devices`` (same order): the lowest free since the poller started."""
    final: bool = False
    """The last sample: the recording ended, or no card is left (see the poller's ``failure``)."""


class TelemetryPoller:
    """Samples the machine's cards until stopped (see the module docstring).

    Args:
        snapshot: replay this recorded snapshot (a path or the parsed JSON).
        backend: an explicit NVML backend (wins over ``snapshot``; default the driver).
        interval_s: seconds between live samples (a replay keeps its recorded times).
        window_s: the sliding window of ``free_min`` and ``desktop_peak``.
        own_pids: pids of engines homelab started (classed ``"homelab"``).
        clock: what time is (default real time).

    Raises:
        GpuProbeError: the snapshot cannot be read (on construction).
    """

    def __init__(
        self,
        *,
        snapshot: Path | str | dict[str, Any] | None = None,
        backend: NvmlBackend | None = None,
        interval_s: float = INTERVAL_S,
        window_s: float = WINDOW_S,
        own_pids: frozenset[int] = frozenset(),
        clock: Clock | None = None,
    ) -> None:
        if backend is None:
            backend = ReplayNvml(snapshot) if snapshot is not None else RealNvml()
        self.backend = backend
        self.interval_s = interval_s
        self.window_s = max(window_s, 0.0)
        self.own_pids = own_pids
        self.failure: GpuProbeError | None = None
        """Why sampling ended early (every card lost); None otherwise."""
        self._clock = clock
        self._hub: EventHub[GpuSample] = EventHub("gpu-telemetry")
        self._session: CardSession | None = None
        self._cpu: GpuReport | None = None
        self._thread: PollThread | None = None
        replay = backend if isinstance(backend, ReplayNvml) else None
        self._times = None if replay is None else replay.sample_times
        self._due = self._schedule()

    # -- subscribing and reading ------------------------------------------------------------

    def subscribe(
        self, callback: Callable[[GpuSample], None], *, queue_size: int | None = None
    ) -> Subscription[GpuSample]:
        """Deliver every later sample to ``callback`` on its own thread; call the result to stop."""
        return self._hub.subscribe(callback, queue_size=queue_size)

    @property
    def latest(self) -> GpuSample | None:
        """The newest sample (None before :meth:`start`)."""
        return self._hub.last

    def wait(
        self, until: Callable[[GpuSample], bool], timeout_s: float | None = None
    ) -> GpuSample | None:
        """Block until the newest sample satisfies ``until`` (or is final); None on timeout."""
        return self._hub.wait_for(lambda sample: sample.final or until(sample), timeout_s)

    def set_own_pids(self, pids: frozenset[int]) -> None:
        """From the next sample on, class these pids as homelab's own (an engine just started)."""
        self.own_pids = pids
        session = self._session
        if session is not None:
            session.set_own_pids(pids)

    @property
    def ended(self) -> bool:
        """True once no more samples will come (stopped, recording over, cards lost)."""
        return self._thread is not None and self._thread.ended.is_set()

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> GpuSample:
        """Initialise NVML, open the cards, take and publish sample 0, then sample on a thread.

        Returns:
            Sample 0.

        Raises:
            GpuProbeError: the driver is present but unusable, or no card could be read.
        """
        if self._thread is not None:
            raise RuntimeError("this telemetry poller was already started")
        opened = open_session(self.backend, self.own_pids)
        if isinstance(opened, GpuReport):
            self._cpu = opened
        else:
            self._session = opened
        thread = PollThread(
            "homelab-gpu-telemetry",
            self._tick,
            self._due,
            self._clock,
            skip_missed=self._times is None,
        )
        self._thread = thread
        self._tick(0)
        if self.failure is not None:
            self.stop()
            raise self.failure
        first = self.latest
        assert first is not None
        if not first.final:
            thread.start()
        else:
            thread.ended.set()
        return first

    def stop(self) -> None:
        """Stop sampling, join the thread, shut NVML down, and let subscribers finish."""
        thread = self._thread
        if thread is not None:
            thread.stop()
            thread.ended.set()
        session, self._session = self._session, None
        if session is not None:
            session.close()
        self._hub.close(timeout_s=1.0)

    def __enter__(self) -> TelemetryPoller:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- sampling -----------------------------------------------------------------------------

    def _schedule(self) -> Schedule:
        times = self._times
        if times is None:
            return every(self.interval_s)
        first = times[0] if times and times[0] is not None else 0.0

        def recorded(k: int) -> float | None:
            if k >= len(times):
                return None
            t = times[k]
            return k * self.interval_s if t is None else max(t - first, 0.0)

        return recorded

    def _tick(self, k: int) -> bool:
        thread = self._thread
        assert thread is not None
        at = thread.elapsed() if self._times is None else (self._due(k) or 0.0)
        last = self._times is not None and k >= len(self._times) - 1
        session = self._session
        if session is None:  # no card: system RAM, said as the probe said it
            assert self._cpu is not None
            ram = cpu_report(self._cpu.note or "", self._cpu.warnings)
            self._hub.publish(GpuSample(k, at, ram, (), final=last))
            return not last
        try:
            session.sample(at)
        except GpuProbeError as error:
            self.failure = error
            source: ReportSource = "replay" if session.replay else "nvml"
            empty = GpuReport(source, (), warnings=tuple(session.warnings))
            self._hub.publish(GpuSample(k, at, empty, (), final=True))
            return False
        session.trim(at - self.window_s)
        kept = session.samplers[0].samples
        report = session.report(kept[-1].at - kept[0].at)
        lowest = tuple(s.lowest_free for s in session.samplers)
        self._hub.publish(GpuSample(k, at, report, lowest, final=last))
        return not last
