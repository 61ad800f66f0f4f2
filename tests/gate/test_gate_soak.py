"""A short soak of the real gate in front of the real llama-server (SmolLM2, loopback):
about a minute of the mix in :mod:`tests.gate.soak_mix` — good chats, streamed and not,
beside bad JSON, oversized prompts, streams dropped mid-answer, idle sockets and slow
senders — then the gate must be as it was: every good request answered 200 and whole,
every bad one refused as such, every idle and slow socket closed by the gate, no charge
held, open descriptors back to where they started, nothing logged with a traceback.

The long one, with RSS and latency against a baseline, is ``bench/bench_gate_soak.py``.
No timed assertion: the minute bounds the traffic, not a verdict.
"""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from tests.gate.conftest import wait_for
from tests.gate.soak_mix import Mix, Pace
from tests.gate.test_gate_hostile import no_traceback

pytestmark = pytest.mark.engine

SECONDS = float(os.environ.get("HOMELAB_SOAK_S", "60"))
IDLE_TIMEOUT_S = 2.0
SETTLE_S = 60.0
"""How long the gate may take to hand back charges and sockets after the last client
(a dropped stream's charge waits for the engine's slot to go idle)."""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_short_soak_leaves_the_gate_as_it_found_it(engine, gate, caplog) -> None:
    caplog.set_level(logging.WARNING)
    g = gate(engine, idle_timeout_s=IDLE_TIMEOUT_S, max_tokens_cap=32)
    fds = open_fds()
    mix = Mix(g.url)
    asyncio.run(mix.soak(SECONDS, Pace(), IDLE_TIMEOUT_S))
    tally = mix.tally
    outcomes = dict(tally.outcomes)
    print("soak outcomes:", outcomes)  # shown with -s, and on a failure

    assert not tally.failures, tally.failures[:5]
    assert outcomes.get("good 200", 0) >= 2, outcomes
    assert sum(n for k, n in outcomes.items() if k.startswith("bad-json")) > 0, outcomes
    assert {k for k in outcomes if k.startswith("bad-json")} == {"bad-json 400"}, outcomes
    assert {k for k in outcomes if k.startswith("oversized")} == {"oversized 413"}, outcomes
    assert {k for k in outcomes if k.startswith("dropped")} == {"dropped 200"}, outcomes
    for name in ("idle", "slow"):
        closed = {k for k in outcomes if k.startswith(name)}
        assert closed and all("closed by gate" in k for k in closed), outcomes

    def settled() -> bool:
        s = g.state()
        return (s.charged_tokens, s.running, s.queued) == (0, 0, 0)

    wait_for(settled, SETTLE_S, what=f"no charge held (now {g.state()})")
    wait_for(lambda: open_fds() <= fds, SETTLE_S, what=f"open fds back to {fds}")
    no_traceback(caplog.records)
