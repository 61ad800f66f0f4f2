"""Heal at run time, for real: llama-server under an address-space cap (``engine_memory_limit``,
RLIMIT_AS) loads 4 slots of SmolLM2 with a few MiB to spare, answers a long prompt, and when the
next request comes it copies the long slot's state (~48 KB a token of f32 KV) into its host-RAM
prompt cache: the allocation fails and b11312 logs::

    E srv         alloc: failed to allocate memory for prompt cache state: std::bad_alloc
    W srv         alloc:  - cache size limit reduced to 0.000 MiB

and keeps serving without the cache. The session treats that as an out-of-memory at run
time: it re-plans with fewer slots (the freed KV gives the cache room), restarts into it,
the engine is ready again and answers, and the miss is in the calibration store.

Real llama-server (b11312 CPU build), real SmolLM2, real requests; nothing edited. The cap
was found by measuring (q8_0 KV, 382 MiB): 4 × 8,192 tokens load uncapped to a VmPeak of
746-811 MiB (one 64 MiB malloc arena more or less), under 775 MiB the load fails (compute
buffer), at 822 MiB a 2,900-token prompt's 34 MiB state failed to save in one run and fit
in another (the arena). f32 KV makes the state four times larger than that slack: 1,440 MiB
of KV, the same ~830 MiB margin over it, and a ~107 MiB state that cannot fit.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import httpx
import pytest

from homelab.engine.session import events as ev
from homelab.engine.session.serve import ServeRequest, ServeSession
from homelab.engine.supervision.states import RestartPolicy, State
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.calibration_miss import misses
from homelab.plan.options import PlanOptions
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine

LIMIT = 1890 << 20
"""Address space for 4 slots × 8,192 tokens of f32 KV (1,440 MiB) to load with a little to
spare, too little for the prompt cache to hold a 2,300-token slot's state (~48 KB a token)."""
RAM = GpuReport(
    source="cpu",
    devices=(),
    cpu=CpuMemory(total=16 << 30, available=16 << 30),
    note="a fixed 16 GiB of RAM (the test's card)",
)
FAST = RestartPolicy(max_crashes=8, window_s=600, backoff_first_s=0.1, backoff_max_s=0.4)


def _prompt(words: int, seed: int) -> str:
    rng = random.Random(seed)
    names = ["apple", "river", "stone", "cloud", "green", "music", "paper", "light", "table"]
    return " ".join(f"{rng.choice(names)}{rng.randint(0, 99)}" for _ in range(words))


def _complete(url: str, prompt: str) -> dict:
    body = {"prompt": prompt, "n_predict": 2, "cache_prompt": True}
    response = httpx.post(f"{url}/completion", json=body, timeout=180)
    response.raise_for_status()
    return response.json()


def _wait(predicate, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_a_prompt_cache_that_cannot_allocate_at_run_time_heals_to_fewer_slots(
    smollm2_gguf: Path, engines
) -> None:
    options = PlanOptions(
        engine_memory_limit=LIMIT,
        port=free_port(),
        slots=4,
        ctx=4 * 8192,
        cache_type_k="f32",
        cache_type_v="f32",
        prove=False,
    )
    session = ServeSession(
        ServeRequest(str(smollm2_gguf), options, report=RAM, start_timeout_s=120), policy=FAST
    )
    seen: list = []
    session.subscribe(seen.append)
    track = session.subscribe(
        lambda e: engines.track(e.transition.pid) if isinstance(e, ev.EngineChanged) else None
    )
    try:
        session.start()
        session.wait_ready()
        assert not [e for e in seen if isinstance(e, ev.Healing)], "the cap bit at load"
        supervisor = session.supervisor
        assert supervisor is not None
        url, first = supervisor.url, supervisor.events[-1].attempt
        assert url is not None

        long = _complete(url, _prompt(800, 1))  # a slot of ~2,300 tokens: ~107 MiB of state
        assert long["tokens_evaluated"] > 2000
        _complete(url, _prompt(20, 2))  # the long slot's state goes to the prompt cache: no room

        assert _wait(lambda: any(isinstance(e, ev.Healing) for e in seen)), "nothing ran out"
        healing = next(e for e in seen if isinstance(e, ev.Healing))
        assert healing.stage == "run"
        assert "failed to allocate memory for prompt cache state" in healing.said
        assert healing.was.slots == 4 and healing.now.slots == 2
        assert healing.now.ctx_per_slot == 8192

        def back() -> bool:
            last = supervisor.events[-1]
            return last.state is State.READY and last.attempt > first

        assert _wait(back), f"not ready again: {supervisor.events[-1]}"
        assert session.plan is not None and session.plan.facts.slots == 2
        assert _complete(supervisor.url or url, _prompt(20, 3))["tokens_evaluated"] > 0
        assert _wait(lambda: any(isinstance(e, ev.Healed) for e in seen))
        healed = next(e for e in seen if isinstance(e, ev.Healed))
        assert healed.recorded and healed.worked.slots == 2
        log = Path(next(e for e in seen if isinstance(e, ev.Started)).log_path).read_text()
        assert "std::bad_alloc" in log
    finally:
        session.stop(let_go=False)
        track()
        session.close()

    (miss,) = misses()
    assert miss.stage == "run" and miss.key.memory_limit == LIMIT
    assert [f.slots for f in miss.failed] == [4] and miss.worked.slots == 2
