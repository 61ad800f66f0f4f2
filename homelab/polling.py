"""The pollers' time: a clock to wait on, and the thread that ticks on it.

:class:`PollThread` runs ``tick(k)`` at the times a schedule gives (seconds after the
start), on a thread it owns, until the schedule ends or :meth:`PollThread.stop`. Time
comes from a :class:`Clock`: :class:`MonotonicClock` is the real one; a test's
clock that moves only when told decides when each tick happens and never sleeps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger(__name__)


class Clock(Protocol):
    """What a poller waits on."""

    def now(self) -> float:
        """Seconds on this clock's own axis (monotonic)."""
        ...

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        """Block until ``now() >= deadline``; False as soon as ``stop`` is set instead."""
        ...

    def interrupt(self) -> None:
        """Wake every :meth:`wait_until` so it sees its ``stop`` event."""
        ...


class MonotonicClock:
    """Real time (``time.monotonic``)."""

    def now(self) -> float:
        return time.monotonic()

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        while (remaining := deadline - time.monotonic()) > 0:
            if stop.wait(remaining):
                return False
        return not stop.is_set()

    def interrupt(self) -> None:
        pass  # waits are on the stop event itself


Schedule = Callable[[int], float | None]
"""Tick ``k`` → seconds after the start it is due at, or None: no more ticks."""


def every(interval_s: float) -> Schedule:
    """A tick every ``interval_s`` seconds, forever."""
    if not interval_s > 0:
        raise ValueError(f"a poll interval must be positive, not {interval_s}")
    return lambda k: k * interval_s


class PollThread:
    """Calls ``tick(k)`` (k = 1, 2, ...) when ``schedule(k)`` is due, on its own thread.

    Tick 0 is the caller's (a poller takes its first sample on the thread that starts it,
    so start-up errors reach the caller). Ticks missed while a tick ran late (or while a
    manual clock jumped) are skipped: the latest one due is taken at once, then the
    schedule resumes; with ``skip_missed=False`` every tick is taken (a replay plays every
    recorded sample). A tick that raises is logged and ends the thread; ``tick``
    returning False ends it too.

    Args:
        name: the thread's name.
        tick: one round of work.
        schedule: when each tick is due (see :data:`Schedule`).
        clock: what to wait on (default: real time).
        skip_missed: skip ticks that are overdue (see above).
    """

    def __init__(
        self,
        name: str,
        tick: Callable[[int], bool],
        schedule: Schedule,
        clock: Clock | None = None,
        *,
        skip_missed: bool = True,
    ) -> None:
        self.clock: Clock = clock or MonotonicClock()
        self.started_at = self.clock.now()
        self.ended = threading.Event()
        """Set once the thread has ended (schedule over, stopped, or failed)."""
        self._name = name
        self._tick = tick
        self._schedule = schedule
        self._skip_missed = skip_missed
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def elapsed(self) -> float:
        """Seconds since the start, on the clock."""
        return self.clock.now() - self.started_at

    def start(self) -> None:
        """Start ticking (once); the start time counts from construction."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float | None = 10.0) -> None:
        """Stop after the tick in progress and join the thread."""
        self._stop.set()
        self.clock.interrupt()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _run(self) -> None:
        k = 1
        try:
            while (due := self._schedule(k)) is not None:
                if not self.clock.wait_until(self.started_at + due, self._stop):
                    return
                if self._skip_missed:
                    now = self.elapsed()
                    while (following := self._schedule(k + 1)) is not None and following <= now:
                        k += 1  # more than one interval behind: skip the missed ticks
                if not self._tick(k):
                    return
                k += 1
        except Exception:
            logger.exception("%s failed", self._name)
        finally:
            self.ended.set()
