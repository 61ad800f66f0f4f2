"""A clock for the pollers that moves only when the test says."""

from __future__ import annotations

import threading


class ManualClock:
    """A clock that moves only when told to (tests, step-by-step replays)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._moved = threading.Condition()
        self._waiting = 0

    def now(self) -> float:
        with self._moved:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds``; returns the new time."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back ({seconds} s)")
        with self._moved:
            self._now += seconds
            self._moved.notify_all()
            return self._now

    def wait_until(self, deadline: float, stop: threading.Event) -> bool:
        with self._moved:
            self._waiting += 1
            self._moved.notify_all()
            try:
                self._moved.wait_for(lambda: stop.is_set() or self._now >= deadline)
            finally:
                self._waiting -= 1
                self._moved.notify_all()
            return not stop.is_set()

    def interrupt(self) -> None:
        with self._moved:
            self._moved.notify_all()

    def wait_for_waiter(self, timeout_s: float | None = None) -> bool:
        """Block until some thread waits on this clock (a poller between two ticks)."""
        with self._moved:
            return self._moved.wait_for(lambda: self._waiting > 0, timeout_s)
