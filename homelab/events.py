"""Live events: a tiny publish/subscribe hub whose subscribers never slow the producer.

Domain threads (the supervisor's run loop, the engine log follower, the GPU telemetry
poller, the engine status poller) :meth:`EventHub.publish` frozen dataclasses; front-ends
(the CLI, the TUI, the gate) :meth:`EventHub.subscribe` a callback. Each subscription owns
a bounded queue and a delivery thread: ``publish`` only appends to the queues (a lock held
for a ``deque.append``), so a subscriber that sleeps, blocks on a lock or draws slowly
never delays the producer. When a subscriber falls more than ``queue_size`` events behind,
its *oldest* undelivered events are dropped (counted in :attr:`Subscription.dropped`):
live views want the latest state, not a backlog.

Each subscriber sees events in publish order, on its own thread (one per subscription,
named after the hub); a callback that raises is logged and delivery goes on.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

E = TypeVar("E")

QUEUE_SIZE = 256
"""Events a subscription holds before it drops its oldest."""


class Subscription(Generic[E]):
    """One subscriber's queue and delivery thread; calling it (or :meth:`cancel`) unsubscribes.

    Built by :meth:`EventHub.subscribe`.
    """

    def __init__(
        self,
        hub: EventHub[E],
        callback: Callable[[E], None],
        queue_size: int,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"a subscription holds at least one event, not {queue_size}")
        self.callback = callback
        self._hub = hub
        self._queue: deque[E] = deque(maxlen=queue_size)
        self._ready = threading.Condition(threading.Lock())
        self._busy = False
        self._closed = False
        self.dropped = 0
        """Events dropped because this subscriber was ``queue_size`` events behind."""
        self.delivered = 0
        """Events handed to the callback (raised or not)."""
        self._thread = threading.Thread(
            target=self._deliver, name=f"homelab-{hub.name}-subscriber", daemon=True
        )
        self._thread.start()

    def offer(self, event: E) -> None:
        """Queue ``event`` (dropping the oldest when full); never waits for the callback."""
        with self._ready:
            if self._closed:
                return
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append(event)
            self._ready.notify()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued event was delivered; False if ``timeout_s`` passed first."""
        with self._ready:
            return self._ready.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def cancel(self, timeout_s: float | None = 5.0) -> None:
        """Unsubscribe: no new events; the ones queued are still delivered, then the thread ends.

        Waits up to ``timeout_s`` for the thread (not when called from the callback itself).
        """
        self._hub.discard(self)
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    __call__ = cancel

    @property
    def alive(self) -> bool:
        """True while the delivery thread runs."""
        return self._thread.is_alive()

    def _deliver(self) -> None:
        while True:
            with self._ready:
                self._busy = False
                self._ready.notify_all()  # flush() waiters
                self._ready.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                event = self._queue.popleft()
                self._busy = True
            try:
                self.callback(event)
            except Exception:
                logger.exception("%s subscriber failed", self._hub.name)
            self.delivered += 1


class EventHub(Generic[E]):
    """Fan one producer's events out to any number of subscribers (see the module docstring).

    Args:
        name: names the delivery threads (``homelab-<name>-subscriber``) and log messages.
        queue_size: the default bound of each subscription's queue.
    """

    def __init__(self, name: str = "events", *, queue_size: int = QUEUE_SIZE) -> None:
        self.name = name
        self.queue_size = queue_size
        self._lock = threading.Lock()
        self._subscriptions: list[Subscription[E]] = []
        self._published = threading.Condition(self._lock)
        self._last: E | None = None

    def subscribe(
        self, callback: Callable[[E], None], *, queue_size: int | None = None
    ) -> Subscription[E]:
        """Deliver every later event to ``callback`` on a thread of its own.

        Returns:
            The subscription; call it (or its ``cancel``) to unsubscribe.
        """
        subscription = Subscription(self, callback, queue_size or self.queue_size)
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def publish(self, event: E) -> None:
        """Hand ``event`` to every subscription's queue; returns at once."""
        with self._lock:
            self._last = event
            self._published.notify_all()
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            subscription.offer(event)

    def discard(self, subscription: Subscription[E]) -> None:
        """Forget ``subscription`` (its :meth:`~Subscription.cancel` calls this)."""
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

    @property
    def last(self) -> E | None:
        """The latest event published (None before the first): what a late viewer shows first."""
        with self._lock:
            return self._last

    def wait_for(self, until: Callable[[E], bool], timeout_s: float | None = None) -> E | None:
        """Block until the latest event satisfies ``until``; it, or None if ``timeout_s`` passed."""
        with self._published:
            found = self._published.wait_for(
                lambda: self._last is not None and until(self._last), timeout_s
            )
            return self._last if found else None

    @property
    def subscriptions(self) -> tuple[Subscription[E], ...]:
        with self._lock:
            return tuple(self._subscriptions)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every subscriber got every event so far; False if ``timeout_s`` passed."""
        return all(s.flush(timeout_s) for s in self.subscriptions)

    def close(self, timeout_s: float | None = 5.0) -> None:
        """Cancel every subscription (each delivers what it holds first)."""
        for subscription in self.subscriptions:
            subscription.cancel(timeout_s)
