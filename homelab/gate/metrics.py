"""The gate's prometheus metrics, on a registry of its own (several gates can live in one
process, as in the tests). ``/metrics`` serves :meth:`GateMetrics.text` with the engine's
own metrics appended."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from homelab.gate.admission import Refusal

WAIT_BUCKETS = (0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class GateMetrics:
    """Counters and gauges of one gate (names start ``homelab_gate_``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.queue_depth = Gauge(
            "homelab_gate_queue_depth", "Requests waiting for admission.", registry=r
        )
        self.running = Gauge(
            "homelab_gate_running", "Requests admitted and not yet released.", registry=r
        )
        self.tokens_charged = Gauge(
            "homelab_gate_tokens_charged", "Tokens charged to running requests.", registry=r
        )
        self.token_budget = Gauge(
            "homelab_gate_token_budget", "Tokens the gate admits at once.", registry=r
        )
        self.max_concurrent = Gauge(
            "homelab_gate_max_concurrent", "Requests the gate runs at once.", registry=r
        )
        self.wait_seconds = Histogram(
            "homelab_gate_wait_seconds",
            "Time from arrival to admission.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.admitted = Counter(
            "homelab_gate_admitted", "Requests admitted to the engine.", registry=r
        )
        self.refused = Counter(
            "homelab_gate_refused", "Requests not admitted, by reason.", ["reason"], registry=r
        )
        for reason in Refusal:
            self.refused.labels(reason=reason.value)
        self.upstream_errors = Counter(
            "homelab_gate_upstream_errors",
            "Engine failures: unreachable, an error status, an error inside a stream, or a stream cut.",
            ["kind"],
            registry=r,
        )
        self.bad_requests = Counter(
            "homelab_gate_bad_requests", "Requests refused as malformed (400).", registry=r
        )
        self.prompt_tokens = Counter(
            "homelab_gate_prompt_tokens", "Prompt tokens the engine reported.", registry=r
        )
        self.cached_tokens = Counter(
            "homelab_gate_cached_prompt_tokens",
            "Prompt tokens the engine reused from its cache.",
            registry=r,
        )
        self.reprefill_alarms = Counter(
            "homelab_gate_reprefill_alarms",
            "Turns of a known conversation that re-processed most of their prompt.",
            registry=r,
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)
