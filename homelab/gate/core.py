"""``Gate``: the gate's parts on its event loop — settings, engine client, limits, the
admission queue, the slot book, reuse accounting and metrics — and its state snapshot."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from homelab.engine.supervision.facts import PlanFacts
from homelab.gate.admission import Refusal
from homelab.gate.affinity import ReuseBook, SlotBook
from homelab.gate.limits import Limits, resolve_limits
from homelab.gate.metrics import GateMetrics
from homelab.gate.requests import Asked
from homelab.gate.settings import GateSettings
from homelab.gate.state import GateState
from homelab.gate.upstream import Upstream
from homelab.gate.waiting import AdmissionQueue

log = logging.getLogger(__name__)


class Gate:
    """Everything one gate holds. Create, use and close on its event loop."""

    def __init__(
        self,
        settings: GateSettings,
        engine_url: str,
        facts: PlanFacts | None,
        engine_key: str | None = None,
        metrics: GateMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.facts = facts
        self.upstream = Upstream(engine_url, engine_key)
        self.metrics = GateMetrics() if metrics is None else metrics
        """The admission's metrics (a set of models shares one among its models' gates)."""
        self.reuse = ReuseBook()
        self.url: str | None = None
        self.queue: AdmissionQueue | None = None
        self.slots: SlotBook | None = None
        self._limits_lock = asyncio.Lock()
        self.background: set[asyncio.Task[None]] = set()
        limits = resolve_limits(settings, facts, None)
        if limits is not None:
            self._use(limits)

    def _use(self, limits: Limits) -> None:
        self.queue = AdmissionQueue(limits, self.settings.max_queue, self.metrics)
        if self.settings.affinity and limits.slots is not None:
            self.slots = SlotBook(limits.slots)
        log.info("gate limits: %s", limits)

    async def ready_queue(self) -> AdmissionQueue | None:
        """The admission queue, resolving the limits from the engine's ``/props`` the first
        time they are needed; None while the engine cannot say (still loading)."""
        if self.queue is not None:
            return self.queue
        async with self._limits_lock:
            if self.queue is None:
                limits = resolve_limits(self.settings, self.facts, await self.upstream.props())
                if limits is not None:
                    self._use(limits)
        return self.queue

    async def retarget(self, facts: PlanFacts | None) -> Limits | None:
        """The engine restarted on another plan: its limits for the live queue (queued
        requests keep their place, running ones their charge; a queued one that could never
        fit now is refused). Without facts, the limits come from the engine's ``/props``.
        Returns the limits in force (None: not known yet)."""
        async with self._limits_lock:
            self.facts = facts
            props = None if facts is not None else await self.upstream.props()
            limits = resolve_limits(self.settings, facts, props)
            if limits is None:
                return None if self.queue is None else self.queue.limits
            if self.queue is None:
                self._use(limits)
                return limits
            self.queue.set_limits(limits)
            if self.slots is not None and limits.slots is not None:
                self.slots.resize(limits.slots)
            elif self.settings.affinity and limits.slots is not None:
                self.slots = SlotBook(limits.slots)
            else:
                self.slots = None
            log.info("gate limits now: %s", limits)
            return limits

    async def prompt_tokens(self, asked: Asked) -> tuple[list[int], bool]:
        """(prompt tokens of each task, exact): the engine's counts, else conservative
        estimates."""
        body = asked.count_body()
        counts: list[int] | None = None
        if body is not None and len(asked.prompts) > 1:  # a list: one /tokenize call
            tokens = await self.upstream.tokenize(body)
            counts = None if tokens is None else asked.split_counts(tokens)
        elif body is not None:
            counted = await self.upstream.count_tokens(asked.route.count_path, body)
            counts = None if counted is None else [counted]
        if counts is None:
            return asked.estimate_tokens(), False
        return asked.per_task(counts), True

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a coroutine that must outlive a cancelled handler (releases)."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def close(self) -> None:
        for task in list(self.background):
            task.cancel()
        if self.background:
            await asyncio.gather(*self.background, return_exceptions=True)
        await self.upstream.close()

    def state(self) -> GateState:
        queue = self.queue
        limits = None if queue is None else queue.limits
        errors = sum(
            sample.value
            for metric in self.metrics.upstream_errors.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        )
        return GateState(
            url=self.url,
            engine_url=self.upstream.url,
            budget_tokens=None if limits is None else limits.budget_tokens,
            ceiling_tokens=None if limits is None else limits.ceiling_tokens,
            max_concurrent=None if limits is None else limits.max_concurrent,
            charged_tokens=0 if queue is None else queue.state.charged,
            running=0 if queue is None else queue.state.running,
            queued=0 if queue is None else queue.state.queued,
            admitted=0 if queue is None else queue.admitted_total,
            refused=({r.value: 0 for r in Refusal} if queue is None else dict(queue.refused_total)),
            cache_hit_rate=self.reuse.hit_rate,
            alarms=tuple(self.reuse.alarms),
            upstream_errors=int(errors),
        )
