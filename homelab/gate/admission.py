"""The bare admission queue: pure, synchronous state (no asyncio, no clock of its own).

The rule is TGI's (``router/src/infer/v3/queue.rs`` ``State::next_batch``): entries are
admitted in strict FIFO order while they fit both the token budget and the concurrency
limit; admission stops at the first entry that does not fit (nothing overtakes it, so a
large request is never starved by a stream of small ones); an entry whose client is gone
leaves the queue (:meth:`AdmissionState.abandon`). A request whose charge exceeds the per-request ceiling could never be
admitted and is refused at once; a full queue refuses the newcomer.

Every operation that can free room returns the ids it admitted, so the caller (the asyncio
layer in :mod:`homelab.gate.waiting`) wakes exactly those waiters — no polling.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum


class Refusal(Enum):
    """Why a request was not admitted (the metrics' ``reason`` label)."""

    QUEUE_FULL = "queue_full"
    TOO_LARGE = "too_large"
    TIMEOUT = "timeout"
    CLIENT_GONE = "client_gone"


@dataclass(slots=True)
class Entry:
    id: int
    charge: int
    places: int = 1


@dataclass(frozen=True, slots=True)
class Offer:
    """The answer to :meth:`AdmissionState.offer`."""

    refused: Refusal | None
    admitted: tuple[int, ...]
    """Ids admitted by this offer (the newcomer among them when it went straight in)."""


class AdmissionState:
    """Queued and running requests against a token budget and a concurrency limit."""

    def __init__(
        self, *, budget: int, max_concurrent: int, max_queue: int, ceiling: int | None = None
    ) -> None:
        if budget < 1 or max_concurrent < 1 or max_queue < 0:
            raise ValueError("budget and max_concurrent must be >= 1, max_queue >= 0")
        self.budget = budget
        self.ceiling = budget if ceiling is None else min(ceiling, budget)
        self.max_concurrent = max_concurrent
        self.max_queue = max_queue
        self._queue: OrderedDict[int, Entry] = OrderedDict()
        self._running: dict[int, int] = {}
        self._places: dict[int, int] = {}
        """Places (engine slots) each running request takes: a list of prompts takes one
        per prompt, at most ``max_concurrent`` (the engine defers the rest)."""
        self._busy = 0
        self._charged = 0
        self.dropped: tuple[int, ...] = ()
        """Queued ids the last :meth:`set_limits` removed: too large for the new limits."""

    # -- what is there ----------------------------------------------------------------

    @property
    def charged(self) -> int:
        """Tokens charged to running requests."""
        return self._charged

    @property
    def running(self) -> int:
        """Places taken by running requests (one per engine task)."""
        return self._busy

    @property
    def queued(self) -> int:
        return len(self._queue)

    # -- changes ----------------------------------------------------------------------

    def offer(self, id: int, charge: int, places: int = 1) -> Offer:
        """Queue a request charged ``charge`` tokens (``places`` engine tasks, each at most
        the ceiling) and admit what fits."""
        if id in self._queue or id in self._running:
            raise ValueError(f"request {id} is already known")
        places = max(1, places)
        if self._too_large(charge, places):
            return Offer(Refusal.TOO_LARGE, ())
        if self.queued >= self.max_queue and not self._fits_now(charge, places):
            return Offer(Refusal.QUEUE_FULL, ())
        self._queue[id] = Entry(id, max(0, charge), places)
        return Offer(None, self._admit())

    def abandon(self, id: int) -> tuple[int, ...]:
        """Remove a queued entry (timeout, client gone); returns ids this admitted (the
        entry may have been the head that blocked the others)."""
        if self._queue.pop(id, None) is None:
            return ()
        return self._admit()

    def release(self, id: int) -> tuple[int, ...]:
        """A running request ended (its engine slot is idle): free its charge, admit."""
        charge = self._running.pop(id, None)
        if charge is None:
            return ()
        self._charged -= charge
        self._busy -= self._places.pop(id)
        return self._admit()

    def reconcile(self, id: int, charge: int) -> tuple[int, ...]:
        """Correct a running request's charge (the engine's own count, after the fact)."""
        if id not in self._running:
            return ()
        charge = max(0, charge)
        self._charged += charge - self._running[id]
        self._running[id] = charge
        return self._admit()

    def set_limits(self, *, budget: int, max_concurrent: int, ceiling: int | None = None) -> Offer:
        """New limits (the engine restarted with another plan). Running requests keep their
        charge; queued ones keep their place, except those now larger than a request may
        ever be, which leave the queue (``refused`` is TOO_LARGE when there were any).
        ``admitted``: what now fits; the caller answers the refused ones (:attr:`dropped`)."""
        if budget < 1 or max_concurrent < 1:
            raise ValueError("budget and max_concurrent must be >= 1")
        self.budget, self.max_concurrent = budget, max_concurrent
        self.ceiling = budget if ceiling is None else min(ceiling, budget)
        self.dropped = tuple(
            e.id for e in self._queue.values() if self._too_large(e.charge, e.places)
        )
        for id in self.dropped:
            del self._queue[id]
        return Offer(Refusal.TOO_LARGE if self.dropped else None, self._admit())

    # -- the rule ---------------------------------------------------------------------

    def _too_large(self, charge: int, places: int) -> bool:
        return charge > min(self.budget, self.ceiling * places)

    def _fits(self, charge: int, places: int) -> bool:
        taken = min(places, self.max_concurrent)
        return self._busy + taken <= self.max_concurrent and self._charged + charge <= self.budget

    def _fits_now(self, charge: int, places: int) -> bool:
        return not self._queue and self._fits(charge, places)

    def _admit(self) -> tuple[int, ...]:
        admitted: list[int] = []
        while self._queue:
            head = next(iter(self._queue.values()))
            if not self._fits(head.charge, head.places):
                break
            self._queue.popitem(last=False)
            self._running[head.id] = head.charge
            self._places[head.id] = min(head.places, self.max_concurrent)
            self._charged += head.charge
            self._busy += self._places[head.id]
            admitted.append(head.id)
        return tuple(admitted)
