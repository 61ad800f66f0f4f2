"""Deliver events to subscribers without ever blocking the producer.

Each subscriber gets a queue and a thread of its own: :meth:`EventBus.publish` only puts
the event on every queue, so a slow or stuck subscriber (a terminal that blocks, a UI
busy redrawing) delays nobody but itself. Events reach one subscriber in the order they
were published. :meth:`EventBus.flush` waits until every subscriber has seen what was
published so far (a front-end calls it before printing something of its own).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from homelab.serve.events import SessionEvent

logger = logging.getLogger(__name__)

_STOP = object()


class _Subscriber:
    def __init__(self, callback: Callable[[SessionEvent], None]) -> None:
        self.callback = callback
        self.queue: queue.SimpleQueue[SessionEvent | threading.Event | object] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._drain, name="homelab-events", daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        while True:
            item = self.queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):  # a flush marker
                item.set()
                continue
            try:
                self.callback(cast("SessionEvent", item))  # all else put here is an event
            except Exception:
                logger.exception("event subscriber failed")


class EventBus:
    """Publish/subscribe with one delivery thread per subscriber (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: list[_Subscriber] = []
        self.history: list[SessionEvent] = []
        """Every event published, oldest first."""

    def subscribe(self, callback: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Deliver every later event to ``callback`` (on a thread of its own); returns the
        unsubscribe function."""
        subscriber = _Subscriber(callback)
        with self._lock:
            self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            with self._lock:
                if subscriber in self._subscribers:
                    self._subscribers.remove(subscriber)
            subscriber.queue.put(_STOP)

        return unsubscribe

    def publish(self, event: SessionEvent) -> None:
        """Queue ``event`` for every subscriber; returns at once."""
        with self._lock:
            self.history.append(event)
            subscribers = list(self._subscribers)
        for subscriber in subscribers:
            subscriber.queue.put(event)

    def flush(self, timeout_s: float | None = 10.0) -> bool:
        """Wait until every subscriber has handled what was published so far; True if so."""
        with self._lock:
            subscribers = list(self._subscribers)
        markers = []
        for subscriber in subscribers:
            marker = threading.Event()
            subscriber.queue.put(marker)
            markers.append(marker)
        return all(marker.wait(timeout_s) for marker in markers)

    def close(self, timeout_s: float | None = 10.0) -> None:
        """Deliver what is queued, then end every subscriber's thread."""
        self.flush(timeout_s)
        with self._lock:
            subscribers, self._subscribers = self._subscribers, []
        for subscriber in subscribers:
            subscriber.queue.put(_STOP)
