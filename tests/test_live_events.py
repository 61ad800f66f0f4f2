"""homelab.events and homelab.polling: subscribers never block the producer; the manual clock.

A subscriber "that sleeps" is one blocked on an event the test holds: it cannot return
until the test lets it, however long the producer runs, so nothing here depends on speed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest

from homelab.events import EventHub
from homelab.polling import PollThread, every
from tests.factory.clock import ManualClock

WAIT_S = 30.0  # a bound for a loaded machine, never an expectation


@dataclass(frozen=True, slots=True)
class Tick:
    n: int


class Blocked:
    """A subscriber stuck in its first call until :meth:`release`."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.seen: list[int] = []

    def __call__(self, event: Tick) -> None:
        self.entered.set()
        self.gate.wait()
        self.seen.append(event.n)

    def release(self) -> None:
        self.gate.set()


def test_a_blocked_subscriber_neither_blocks_publish_nor_the_others() -> None:
    hub: EventHub[Tick] = EventHub("test")
    slow = Blocked()
    fast: list[int] = []
    slow_sub = hub.subscribe(slow, queue_size=8)
    fast_sub = hub.subscribe(lambda e: fast.append(e.n), queue_size=10_000)
    hub.publish(Tick(0))
    assert slow.entered.wait(WAIT_S)  # the slow one now holds event 0 and does not return
    for n in range(1, 1000):
        hub.publish(Tick(n))  # would hang here if publish waited for the slow subscriber
    assert fast_sub.flush(WAIT_S)
    assert fast == list(range(1000)) and fast_sub.dropped == 0
    assert hub.last == Tick(999)
    assert slow.seen == [] and not slow_sub.flush(0)

    slow.release()
    assert slow_sub.flush(WAIT_S)
    # it got what it held, then the newest 8: the oldest of the backlog were dropped
    assert slow.seen == [0, *range(992, 1000)]
    assert slow_sub.dropped == 1000 - 1 - 8 and slow_sub.delivered == 9
    hub.close()
    assert not slow_sub.alive and not fast_sub.alive


def test_a_subscriber_that_raises_is_logged_and_still_served(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub: EventHub[Tick] = EventHub("raising")
    seen: list[int] = []

    def flaky(event: Tick) -> None:
        seen.append(event.n)
        if event.n == 1:
            raise RuntimeError("boom")

    sub = hub.subscribe(flaky)
    for n in range(3):
        hub.publish(Tick(n))
    assert sub.flush(WAIT_S)
    assert seen == [0, 1, 2]
    assert "raising subscriber failed" in caplog.text
    sub()  # calling a subscription unsubscribes
    hub.publish(Tick(3))
    assert seen == [0, 1, 2] and hub.subscriptions == ()


def test_cancel_delivers_what_was_queued_then_ends_the_thread() -> None:
    hub: EventHub[Tick] = EventHub("cancel")
    slow = Blocked()
    sub = hub.subscribe(slow)
    for n in range(5):
        hub.publish(Tick(n))
    assert slow.entered.wait(WAIT_S)
    releaser = threading.Timer(0.0, slow.release)
    releaser.start()
    sub.cancel(timeout_s=WAIT_S)
    releaser.join()
    assert slow.seen == [0, 1, 2, 3, 4] and not sub.alive


def test_wait_for_returns_the_latest_matching_event() -> None:
    hub: EventHub[Tick] = EventHub("wait")
    assert hub.last is None and hub.wait_for(lambda e: True, 0) is None
    publisher = threading.Thread(target=lambda: [hub.publish(Tick(n)) for n in range(50)])
    publisher.start()
    found = hub.wait_for(lambda e: e.n == 49, WAIT_S)
    publisher.join()
    assert found == Tick(49)


def test_poll_thread_ticks_when_the_manual_clock_says() -> None:
    clock = ManualClock()
    ticks: list[tuple[int, float]] = []
    ticked = threading.Condition()

    def tick(k: int) -> bool:
        with ticked:
            ticks.append((k, clock.now()))
            ticked.notify_all()
        return k < 4

    thread = PollThread("test-poll", tick, every(0.5), clock)
    thread.start()
    assert clock.wait_for_waiter(WAIT_S)
    assert ticks == []  # nothing is due before the clock moves
    clock.advance(0.5)
    with ticked:
        assert ticked.wait_for(lambda: len(ticks) == 1, WAIT_S)
    clock.advance(2.0)  # four intervals at once: the missed ticks are skipped, not replayed
    with ticked:
        assert ticked.wait_for(lambda: len(ticks) == 2, WAIT_S)
    assert [k for k, _ in ticks] == [1, 5]
    assert thread.ended.wait(WAIT_S)  # tick 5 returned False: the thread ended by itself
    thread.stop()


def test_stop_interrupts_a_wait_and_joins() -> None:
    clock = ManualClock()
    thread = PollThread("test-stop", lambda k: True, every(60.0), clock)
    thread.start()
    assert clock.wait_for_waiter(WAIT_S)
    thread.stop(timeout_s=WAIT_S)
    assert thread.ended.is_set()
    assert not any(t.name == "test-stop" for t in threading.enumerate())
    with pytest.raises(ValueError, match="positive"):
        every(0)
