"""``ModelPool``: the models of a set behind one gate, loaded and unloaded by memory.

Each model has its own engine (one llama-server, started and stopped by a
:class:`EngineLoader` the application gives) and, while loaded, its own :class:`Gate`: its
slots, its budget, its admission queue. A request for a loaded model goes to that gate at
once (:meth:`ModelPool.acquire`). A request for one that is not loaded waits in that model's
line while the pool loads it — one swap at a time — unloading the residents that must go
for it to fit: idle ones first, least recently used first, then busy ones, which are never
cut: they stop taking new requests and drain first. Then every waiter is answered by the
model it named.

What fits is the placement's own arithmetic (:mod:`homelab.plan.model_set`): each model's
bytes per device, summed over the residents, against each device's usable memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from homelab.engine.supervision.facts import PlanFacts
from homelab.gate.admission import Refusal
from homelab.gate.core import Gate
from homelab.gate.metrics import GateMetrics
from homelab.gate.set_metrics import SetMetrics
from homelab.gate.settings import GateSettings
from homelab.gate.waiting import Refused
from homelab.plan.models_file import matches

log = logging.getLogger(__name__)

ModelState = Literal["unloaded", "loading", "loaded", "unloading"]
FAILED_HOLD_S = 30.0
"""A model whose engine failed to load answers its requests with that failure for this
long before the next request tries again (a bad file must not be loaded in a loop)."""


@dataclass(frozen=True, slots=True)
class LoadedEngine:
    """A model's engine, started and ready."""

    url: str
    key: str | None = field(default=None, repr=False)
    facts: PlanFacts | None = None


class EngineLoader(Protocol):
    """Starts and stops a model's engine (the application's supervisor)."""

    async def load(self, model: str) -> LoadedEngine:
        """Start ``model``'s engine and return once it is ready; raises on failure."""
        ...

    async def unload(self, model: str) -> None:
        """Stop ``model``'s engine (its memory is free once this returns)."""
        ...


class LoadFailed(Exception):
    """The model's engine could not be loaded (or can never fit): said to its requests."""


@dataclass(frozen=True, slots=True)
class SetModel:
    """One model of the set as the gate routes to it."""

    id: str
    aliases: tuple[str, ...] = ()
    costs: Mapping[str, int] = field(default_factory=dict)
    """Its bytes on each device (llama-server's device name), from its plan."""


@dataclass(eq=False)
class Member:
    model: SetModel
    state: ModelState = "unloaded"
    gate: Gate | None = None
    inflight: int = 0
    waiting: int = 0
    draining: bool = False
    last_used: float = 0.0
    failure: str | None = None
    failed_at: float = 0.0
    swap: asyncio.Task[None] | None = None

    @property
    def usable(self) -> bool:
        return self.state == "loaded" and not self.draining and self.gate is not None


class ModelPool:
    """The set's models on the card. Create, use and close on the gate's event loop."""

    def __init__(
        self,
        models: Sequence[SetModel],
        budgets: Mapping[str, int],
        loader: EngineLoader,
        settings: GateSettings,
        *,
        idle_ttl_s: float | None = None,
    ) -> None:
        self.members = {m.id: Member(m) for m in models}
        self.order = [m.id for m in models]
        self.budgets = dict(budgets)
        self.loader = loader
        self.settings = settings
        self.idle_ttl_s = idle_ttl_s
        self.gate_metrics = GateMetrics()
        self.metrics = SetMetrics([m.id for m in models])
        self._swap_lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._ttl_task: asyncio.Task[None] | None = None
        self.url: str | None = None

    # -- names ---------------------------------------------------------------------------

    def resolve(self, name: str) -> Member | None:
        """The member ``name`` (an id or one of its aliases) names; None: no such model."""
        if name in self.members:
            return self.members[name]
        for ident in self.order:
            member = self.members[ident]
            if matches(name, ident, member.model.aliases):
                return member
        return None

    def default(self) -> Member:
        """The model a request that names none gets: the most wanted (the first listed)."""
        return self.members[self.order[0]]

    def any_loaded(self) -> Member | None:
        """A loaded model for a request about no model in particular (``/props``)."""
        for ident in self.order:
            if self.members[ident].usable:
                return self.members[ident]
        return None

    # -- start, stop ---------------------------------------------------------------------

    async def start(self, resident: Sequence[str]) -> None:
        """Load ``resident`` (the placement's residents), one after another."""
        for ident in resident:
            async with self._swap_lock:
                if self.members[ident].state == "unloaded":
                    await self._load(self.members[ident])
        if self.idle_ttl_s is not None:
            self._ttl_task = asyncio.get_running_loop().create_task(self._ttl_loop())

    async def close(self) -> None:
        if self._ttl_task is not None:
            self._ttl_task.cancel()
        for member in self.members.values():
            if member.swap is not None:
                member.swap.cancel()
            if member.gate is not None:
                await member.gate.close()
                member.gate = None

    # -- a request's model -----------------------------------------------------------------

    async def acquire(self, member: Member) -> Gate:
        """``member``'s gate, loaded for this request (counted in flight until
        :meth:`release`). Waits in the model's line while it loads.

        Raises:
            Refused: the line is full (``queue_full``) or the wait ran past the queue timeout.
            LoadFailed: its engine failed to load (recently), or it can never fit.
        """
        if member.usable:
            return self._enter(member)
        if member.waiting >= self.settings.max_queue:
            raise Refused(Refusal.QUEUE_FULL, self._retry_after())
        member.waiting += 1
        self.metrics.waiting.labels(model=member.model.id).inc()
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.settings.queue_timeout_s):
                while True:
                    changed = self._changed
                    if member.usable:
                        return self._enter(member)
                    recent = time.monotonic() - member.failed_at < FAILED_HOLD_S
                    if member.failure is not None and recent:
                        raise LoadFailed(member.failure)
                    if member.state == "unloaded" and member.swap is None:
                        self._start_swap(member)
                    await changed.wait()
        except TimeoutError:
            raise Refused(Refusal.TIMEOUT, self._retry_after()) from None
        finally:
            member.waiting -= 1
            self.metrics.waiting.labels(model=member.model.id).dec()
            self.metrics.wait_seconds.observe(time.monotonic() - started)
            self.metrics.recent_waits_s.append(time.monotonic() - started)

    def release(self, member: Member) -> None:
        """A request of ``member``'s is answered (or gone)."""
        member.inflight -= 1
        member.last_used = time.monotonic()
        self.metrics.inflight.labels(model=member.model.id).dec()
        self._notify()

    def _enter(self, member: Member) -> Gate:
        assert member.gate is not None
        member.inflight += 1
        member.last_used = time.monotonic()
        self.metrics.inflight.labels(model=member.model.id).inc()
        return member.gate

    def _retry_after(self) -> int:
        swap = self.metrics.last_swap_s
        return max(1, int(swap + 1)) if swap is not None else 5

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _start_swap(self, member: Member) -> None:
        task = asyncio.get_running_loop().create_task(self._swap_in(member))
        member.swap = task
        task.add_done_callback(lambda _done: self._swapped(member))

    def _swapped(self, member: Member) -> None:
        task, member.swap = member.swap, None
        if task is not None and not task.cancelled() and task.exception() is not None:
            error = task.exception()
            member.failure = str(error) or type(error).__name__
            member.failed_at = time.monotonic()
            self.metrics.load_failures.labels(model=member.model.id).inc()
            log.warning("model %s failed to load: %s", member.model.id, member.failure)
        self._notify()

    # -- swaps ---------------------------------------------------------------------------

    async def _swap_in(self, member: Member) -> None:
        """Make room for ``member`` and load it; one swap at a time."""
        async with self._swap_lock:
            if member.state != "unloaded":
                return
            started = time.monotonic()
            victims = self._victims(member)
            for victim in victims:  # they take no new request from now on
                victim.draining = True
            self._notify()
            try:
                for victim in victims:
                    await self._drain(victim)
                    await self._unload(victim, why=f"to load {member.model.id}")
            finally:
                for victim in victims:
                    victim.draining = False
            await self._load(member)
            took = time.monotonic() - started
            self.metrics.swaps.labels(model=member.model.id).inc()
            self.metrics.swap_seconds.observe(took)
            self.metrics.last_swap_s = took
            self.metrics.recent_swaps_s.append(took)

    def _victims(self, member: Member) -> list[Member]:
        """The residents to unload for ``member`` to fit: idle ones first, then busy ones,
        each group least recently used first.

        Raises:
            LoadFailed: it does not fit even with every other model unloaded.
        """
        free = self._free()
        residents = [m for m in self.members.values() if m.state == "loaded" and m is not member]
        residents.sort(key=lambda m: (m.inflight > 0, m.last_used))
        out: list[Member] = []
        for victim in residents:
            if self._fits(member, free):
                break
            out.append(victim)
            for device, used in victim.model.costs.items():
                free[device] = free.get(device, 0) + used
        if not self._fits(member, free):
            raise LoadFailed(
                f"model {member.model.id!r} does not fit on the card even with every other "
                "model of the set unloaded"
            )
        return out

    def _free(self) -> dict[str, int]:
        free = dict(self.budgets)
        for m in self.members.values():
            if m.state != "unloaded":
                for device, used in m.model.costs.items():
                    free[device] = free.get(device, 0) - used
        return free

    @staticmethod
    def _fits(member: Member, free: Mapping[str, int]) -> bool:
        return all(used <= free.get(device, 0) for device, used in member.model.costs.items())

    async def _drain(self, victim: Member) -> None:
        while victim.inflight > 0:
            changed = self._changed
            if victim.inflight > 0:
                await changed.wait()

    async def _load(self, member: Member) -> None:
        member.state = "loading"
        member.failure = None
        self._notify()
        try:
            engine = await self.loader.load(member.model.id)
        except BaseException:
            member.state = "unloaded"
            raise
        gate = Gate(self.settings, engine.url, engine.facts, engine.key, self.gate_metrics)
        await gate.ready_queue()  # its limits now, from its /props while it surely answers
        member.gate = gate
        member.state = "loaded"
        member.last_used = time.monotonic()
        self.metrics.loaded.labels(model=member.model.id).set(1)
        log.info("model %s loaded at %s", member.model.id, engine.url)
        self._notify()

    async def _unload(self, member: Member, *, why: str) -> None:
        member.state = "unloading"
        self._notify()
        gate, member.gate = member.gate, None
        try:
            if gate is not None:
                await gate.close()
            await self.loader.unload(member.model.id)
        finally:
            member.state = "unloaded"
            self.metrics.loaded.labels(model=member.model.id).set(0)
            self.metrics.evictions.labels(model=member.model.id).inc()
            log.info("model %s unloaded %s", member.model.id, why)
            self._notify()

    async def _ttl_loop(self) -> None:
        """Unload a model idle (nothing in flight, nobody waiting) for ``idle_ttl_s``."""
        assert self.idle_ttl_s is not None
        ttl = self.idle_ttl_s
        while True:
            await asyncio.sleep(max(0.05, min(ttl / 4, 5.0)))
            now = time.monotonic()
            for member in list(self.members.values()):
                idle = member.inflight == 0 and member.waiting == 0
                if member.state == "loaded" and idle and now - member.last_used > ttl:
                    async with self._swap_lock:
                        if member.state == "loaded" and member.inflight == 0:
                            await self._unload(member, why=f"after {ttl:g} s idle")

    # -- what status shows ---------------------------------------------------------------

    def models_json(self) -> list[dict[str, object]]:
        """Each model of the set: id, aliases, state, requests in flight and waiting."""
        return [
            {
                "id": ident,
                "aliases": list(member.model.aliases),
                "state": member.state,
                "loaded": member.state == "loaded",
                "in_flight": member.inflight,
                "waiting": member.waiting,
                "swaps": self.metrics.count(self.metrics.swaps, ident),
                "failure": member.failure,
                "ceiling_tokens": _ceiling(member),
            }
            for ident, member in ((i, self.members[i]) for i in self.order)
        ]


def _ceiling(member: Member) -> int | None:
    """The most tokens one request to ``member`` may be charged (its gate's limits from its
    engine); None while it is not loaded or its engine has not said."""
    queue = None if member.gate is None else member.gate.queue
    return None if queue is None else queue.limits.ceiling_tokens
