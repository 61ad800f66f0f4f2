"""The asyncio layer over :class:`~homelab.gate.admission.AdmissionState`: one event per
waiting request, set when the state admits it (release wakes the head; nothing polls).

Runs on the gate's event loop only (no locks: every change happens on that one thread).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from homelab.gate.admission import AdmissionState, Refusal
from homelab.gate.limits import Limits
from homelab.gate.metrics import GateMetrics

RETRY_AFTER_MAX_S = 60


class Refused(Exception):
    """Not admitted: ``reason`` and the seconds a client should wait before retrying."""

    def __init__(self, reason: Refusal, retry_after_s: int) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.retry_after_s = retry_after_s


@dataclass(eq=False, slots=True)
class Ticket:
    """One request's place: queued, then running, then released."""

    id: int
    arrived: float
    event: asyncio.Event = field(default_factory=asyncio.Event)
    admitted_at: float | None = None
    released: bool = False
    refused: Refusal | None = None
    """Set when the gate refuses it while queued (new limits it can never fit)."""

    @property
    def admitted(self) -> bool:
        return self.admitted_at is not None


class AdmissionQueue:
    """Tickets in and out of the admission state, with the gate's metrics kept current."""

    def __init__(
        self,
        limits: Limits,
        max_queue: int,
        metrics: GateMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.state = AdmissionState(
            budget=limits.budget_tokens,
            max_concurrent=limits.max_concurrent,
            max_queue=max_queue,
            ceiling=limits.ceiling_tokens,
        )
        self.metrics = metrics
        self.clock = clock
        self._ids = itertools.count(1)
        self._tickets: dict[int, Ticket] = {}
        self.admitted_total = 0
        self.refused_total: dict[str, int] = {r.value: 0 for r in Refusal}
        self._run_s = 1.0
        """A moving average of how long an admitted request runs (for Retry-After)."""
        metrics.token_budget.set(limits.budget_tokens)
        metrics.max_concurrent.set(limits.max_concurrent)
        state = self.state  # read when /metrics is scraped, not set on every change
        metrics.queue_depth.set_function(lambda: state.queued)
        metrics.running.set_function(lambda: state.running)
        metrics.tokens_charged.set_function(lambda: state.charged)

    # -- in --------------------------------------------------------------------------

    def enter(self, charge: int, places: int = 1) -> Ticket:
        """A ticket for ``places`` engine tasks charged ``charge`` in all, admitted at once
        or queued.

        Raises:
            Refused: too large for the ceiling, or the queue is full.
        """
        ticket = Ticket(next(self._ids), self.clock())
        self._tickets[ticket.id] = ticket
        offer = self.state.offer(ticket.id, charge, places)
        if offer.refused is not None:
            del self._tickets[ticket.id]
            self.refuse(offer.refused)
            raise Refused(offer.refused, self.retry_after_s())
        self._wake(offer.admitted)
        return ticket

    async def wait(self, ticket: Ticket, timeout_s: float) -> bool:
        """True once admitted or refused (``ticket.refused``); False when ``timeout_s``
        passed first (still queued)."""
        if ticket.admitted or ticket.refused is not None:
            return True
        try:
            await asyncio.wait_for(ticket.event.wait(), timeout=max(0.0, timeout_s))
        except TimeoutError:
            return ticket.admitted or ticket.refused is not None
        return True

    # -- out -------------------------------------------------------------------------

    def leave(self, ticket: Ticket, reason: Refusal) -> None:
        """A queued ticket gives up (timeout, client gone); counted as refused."""
        if ticket.admitted or ticket.released:
            return
        ticket.released = True
        self._tickets.pop(ticket.id, None)
        self.refuse(reason)
        self._wake(self.state.abandon(ticket.id))

    def reconcile(self, ticket: Ticket, charge: int) -> None:
        """Correct a running ticket's charge from the engine's own count."""
        if ticket.admitted and not ticket.released:
            self._wake(self.state.reconcile(ticket.id, charge))

    def release(self, ticket: Ticket) -> None:
        """A running ticket is done (its engine slot is idle). Idempotent."""
        if ticket.released:
            return
        ticket.released = True
        self._tickets.pop(ticket.id, None)
        if ticket.admitted_at is not None:
            ran = self.clock() - ticket.admitted_at
            self._run_s = 0.8 * self._run_s + 0.2 * ran
            self._wake(self.state.release(ticket.id))
        else:
            self._wake(self.state.abandon(ticket.id))

    def refuse(self, reason: Refusal) -> None:
        self.refused_total[reason.value] += 1
        self.metrics.refused.labels(reason=reason.value).inc()

    def set_limits(self, limits: Limits) -> tuple[Ticket, ...]:
        """New limits for the live queue (the engine restarted on another plan): running
        tickets keep their charge, queued ones keep their place; a queued ticket now larger
        than a request may ever be is refused (``too_large``, its waiter woken). Returns
        those refused."""
        self.limits = limits
        self.metrics.token_budget.set(limits.budget_tokens)
        self.metrics.max_concurrent.set(limits.max_concurrent)
        offer = self.state.set_limits(
            budget=limits.budget_tokens,
            max_concurrent=limits.max_concurrent,
            ceiling=limits.ceiling_tokens,
        )
        refused = []
        for id in self.state.dropped:
            ticket = self._tickets.pop(id)
            ticket.released = True
            ticket.refused = Refusal.TOO_LARGE
            self.refuse(Refusal.TOO_LARGE)
            ticket.event.set()
            refused.append(ticket)
        self._wake(offer.admitted)
        return tuple(refused)

    def retry_after_s(self) -> int:
        """Seconds until a place is likely free: the queue ahead times the average run."""
        ahead = self.state.queued + 1
        estimate = self._run_s * ahead / max(1, self.state.max_concurrent)
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil(estimate)))

    # -- inside ------------------------------------------------------------------------

    def _wake(self, ids: tuple[int, ...]) -> None:
        now = self.clock()
        for id in ids:
            ticket = self._tickets.get(id)
            if ticket is None:
                continue
            ticket.admitted_at = now
            self.admitted_total += 1
            self.metrics.admitted.inc()
            self.metrics.wait_seconds.observe(now - ticket.arrived)
            ticket.event.set()
