"""The metrics of a set of models behind one gate (names start ``homelab_gate_model_``):
which are loaded, swaps and their time, evictions, load failures, and the time a request
waited for its model to load. On a registry of their own, beside the admission's."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

RECENT = 256
SWAP_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class SetMetrics:
    def __init__(self, models: Sequence[str]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.loaded = Gauge(
            "homelab_gate_model_loaded",
            "1 while the model's engine is loaded.",
            ["model"],
            registry=r,
        )
        self.swaps = Counter(
            "homelab_gate_model_swaps",
            "Loads on demand: the model loaded (others unloaded first when it did not fit).",
            ["model"],
            registry=r,
        )
        self.evictions = Counter(
            "homelab_gate_model_unloads",
            "The model's engine unloaded (for another model, or idle past the TTL).",
            ["model"],
            registry=r,
        )
        self.load_failures = Counter(
            "homelab_gate_model_load_failures",
            "The model's engine failed to load.",
            ["model"],
            registry=r,
        )
        self.inflight = Gauge(
            "homelab_gate_model_in_flight",
            "Requests of the model being answered.",
            ["model"],
            registry=r,
        )
        self.waiting = Gauge(
            "homelab_gate_model_waiting",
            "Requests waiting for the model to load.",
            ["model"],
            registry=r,
        )
        self.swap_seconds = Histogram(
            "homelab_gate_model_swap_seconds",
            "A swap: the residents that had to go drained and unloaded, the model loaded.",
            buckets=SWAP_BUCKETS,
            registry=r,
        )
        self.wait_seconds = Histogram(
            "homelab_gate_model_wait_seconds",
            "Time a request waited for its model to be loaded.",
            buckets=SWAP_BUCKETS,
            registry=r,
        )
        for name in models:
            for metric in (self.loaded, self.swaps, self.evictions, self.load_failures):
                metric.labels(model=name)
            self.inflight.labels(model=name)
            self.waiting.labels(model=name)
        self.last_swap_s: float | None = None
        self.recent_swaps_s: deque[float] = deque(maxlen=RECENT)
        """The latest swaps' seconds, oldest first (the bench's percentiles)."""
        self.recent_waits_s: deque[float] = deque(maxlen=RECENT)
        """The latest waits of requests whose model was not loaded, oldest first."""

    @staticmethod
    def count(counter: Counter, model: str) -> int:
        return int(counter.labels(model=model)._value.get())

    def text(self) -> bytes:
        return generate_latest(self.registry)
