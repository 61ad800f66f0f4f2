"""When the gate skips asking the engine to count a prompt: only when the request, charged
by the conservative estimate, runs at once with its completion bound untouched (the count
is one engine round trip per request, most of the gate's added latency); the engine's
``usage`` corrects the charge afterwards. Real AdmissionQueue, real parsed requests."""

from __future__ import annotations

import json

from homelab.gate.forward import estimate_if_it_runs_now
from homelab.gate.limits import Limits
from homelab.gate.metrics import GateMetrics
from homelab.gate.requests import ROUTES, parse
from homelab.gate.waiting import AdmissionQueue

CHAT = ROUTES["/v1/chat/completions"]


def _queue(*, budget: int, ceiling: int, max_concurrent: int = 2) -> AdmissionQueue:
    limits = Limits(budget, ceiling, max_concurrent, max_concurrent, "settings")
    return AdmissionQueue(limits, max_queue=8, metrics=GateMetrics())


def _chat(text: str, **fields) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": text}], **fields}).encode()


def test_a_small_request_on_an_idle_gate_is_charged_its_estimate() -> None:
    asked = parse(CHAT, _chat("Say hi.", max_tokens=16))
    estimate = asked.estimate_tokens()[0]
    assert estimate >= len(b"Say hi.")  # at least a token per byte of text
    assert estimate_if_it_runs_now(_queue(budget=4096, ceiling=4096), asked, 8192) == (
        [estimate],
        False,
    )


def test_the_engine_counts_when_the_estimate_would_bound_the_completion() -> None:
    asked = parse(CHAT, _chat("x" * 1000))  # no max_tokens: 8192 wanted, ceiling 4096
    assert estimate_if_it_runs_now(_queue(budget=8192, ceiling=4096), asked, 8192) is None
    capped = parse(CHAT, _chat("x" * 1000, max_tokens=64))
    assert estimate_if_it_runs_now(_queue(budget=8192, ceiling=4096), capped, 8192) is not None


def test_the_engine_counts_when_the_request_would_wait() -> None:
    queue = _queue(budget=2048, ceiling=2048, max_concurrent=1)
    asked = parse(CHAT, _chat("Say hi.", max_tokens=16))
    first = queue.enter(1000)
    assert first.admitted  # the one place is taken
    assert estimate_if_it_runs_now(queue, asked, 8192) is None
    queue.release(first)
    assert estimate_if_it_runs_now(queue, asked, 8192) is not None
