"""Heal at run time, for real: the proof off, a ready engine under an engine memory limit
(RLIMIT_AS) that holds the plan's load but not the lazy work buffer of a full-slot batch
(:mod:`tests.prove.lazy_memory` measures the cap on this build). A client's request that
fills a slot gets HTTP 500 ``decode() failed: std::bad_alloc``; the session restarts the
engine on fewer slots (an asked-for restart, not a crash), the gate in front takes the
smaller plan's limits, later requests are answered, the miss is recorded at stage "run",
and ``homelab serve``'s lines say what happened and what changed, with no stale crash line.
When no smaller plan is left, the session ends with a
:class:`~homelab.serve.heal.HealError` naming what was tried.

Real llama-server (b11312 CPU build), real SmolLM2, real requests; nothing edited.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from homelab.cli.serve_cmd import ServeText
from homelab.engine.engine_key import key_headers
from homelab.engine.supervision.states import State
from homelab.gate.config_file import GateChoices
from homelab.gate.state import STATE_PATH
from homelab.plan.calibration_miss import misses
from homelab.serve import events as ev
from homelab.serve import heal
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.gate_serve.helpers import chat
from tests.prove.lazy_memory import FAST, RAM, Lazy, full_slot_body, options

pytestmark = pytest.mark.engine


def _wait(predicate, timeout_s: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def _gate(url: str) -> dict:
    return httpx.get(f"{url}{STATE_PATH}", timeout=10, trust_env=False).json()


def _fill_a_slot(url: str, key: str | None) -> httpx.Response:
    """The engine's own port: with its own key (it has one behind the gate)."""
    with httpx.Client(base_url=url, timeout=120, headers=key_headers(key)) as client:
        return client.post("/completion", json=full_slot_body(client))


def _session(model: Path, lazy: Lazy, engines, gate=None) -> tuple[ServeSession, list, list]:
    request = ServeRequest(
        str(model),
        options(limit=lazy.cap, prove=False),
        report=RAM,
        start_timeout_s=120,
        gate=gate,
    )
    session = ServeSession(request, policy=FAST)
    seen: list = []
    session.subscribe(seen.append)
    track = session.subscribe(
        lambda e: engines.track(e.transition.pid) if isinstance(e, ev.EngineChanged) else None
    )
    return session, seen, [track]


def test_a_batch_that_cannot_allocate_at_run_time_heals_to_fewer_slots(
    smollm2_gguf: Path, engines, lazy: Lazy, capsys: pytest.CaptureFixture[str]
) -> None:
    session, seen, undo = _session(smollm2_gguf, lazy, engines, gate=GateChoices())
    session.subscribe(ServeText())  # what `homelab serve` prints of these events
    try:
        session.start()
        session.wait_ready()
        assert not [e for e in seen if isinstance(e, ev.Healing)], "the cap bit at load"
        supervisor = session.supervisor
        assert supervisor is not None and supervisor.url is not None
        first = supervisor.events[-1].attempt
        gate_url = session.public_url
        assert gate_url is not None and gate_url != supervisor.url
        assert _gate(gate_url)["max_concurrent"] == 2  # the gate in front admits 2 at once

        failed = _fill_a_slot(
            supervisor.url, supervisor.spec.api_key
        )  # the work buffer cannot grow: a real OOM
        assert failed.status_code == 500, f"the batch held under the cap {lazy}: {failed.text}"
        assert "decode() failed: std::bad_alloc" in failed.text

        assert _wait(lambda: any(isinstance(e, ev.Healing) for e in seen)), "nothing healed"
        healing = next(e for e in seen if isinstance(e, ev.Healing))
        assert healing.stage == "run" and "decode() failed: std::bad_alloc" in healing.said
        assert (healing.was.slots, healing.now.slots, healing.now.ctx_per_slot) == (2, 1, 1024)

        def back() -> bool:
            last = supervisor.events[-1]
            return last.state is State.READY and last.attempt > first

        assert _wait(back), f"not ready again: {supervisor.events[-1]}"
        assert session.plan is not None and session.plan.facts.slots == 1
        url = supervisor.url or ""
        answered = _fill_a_slot(
            url, supervisor.spec.api_key
        )  # the smaller plan's slot, filled: it holds now
        assert answered.status_code == 200, answered.text[:300]
        assert _wait(lambda: any(isinstance(e, ev.Healed) for e in seen))
        healed = next(e for e in seen if isinstance(e, ev.Healed))
        assert healed.recorded and healed.worked.slots == 1
        # the gate in front took the smaller plan's limits, and answers through it
        assert _gate(gate_url)["max_concurrent"] == 1
        assert chat(gate_url).status_code == 200
        states = [t.state for t in supervisor.events]
        assert State.CRASHED not in states  # an asked-for restart, not a crash
    finally:
        session.stop(let_go=False)
        for u in undo:
            u()
        session.close()

    (miss,) = misses()
    assert miss.stage == "run" and miss.key.memory_limit == lazy.cap
    assert [f.slots for f in miss.failed] == [2] and miss.worked.slots == 1

    printed = capsys.readouterr()
    out = printed.out
    assert "out of memory (run): " in out and "decode() failed: std::bad_alloc" in out
    assert out.index("out of memory (run)") < out.index("healing 1/4: 2 slots × 1,024 tokens")
    assert "→ 1 slot × 1,024 tokens; restarting on the smaller plan" in out
    assert "restarting on the new plan" in out and "ready again: " in out
    assert "crashed" not in out + printed.err  # no stale crash line naming the old plan
    assert out.index("restarting on the new plan") < out.index("healed: 1 slot")


def test_a_run_time_heal_with_no_smaller_plan_left_ends_with_a_heal_error(
    smollm2_gguf: Path, engines, lazy: Lazy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heal, "MAX_STEPS", 0)  # no smaller plan may be tried
    session, seen, undo = _session(smollm2_gguf, lazy, engines)
    try:
        session.start()
        session.wait_ready()
        supervisor = session.supervisor
        assert supervisor is not None and supervisor.url is not None
        assert _fill_a_slot(supervisor.url, supervisor.spec.api_key).status_code == 500
        assert supervisor.wait_stopped(60), "the engine was not stopped after the give-up"
        with pytest.raises(heal.HealError) as raised:
            session.finish()
    finally:
        session.end()
        for u in undo:
            u()
        session.close()
    error = raised.value
    assert error.title == "Out of memory, not healed"
    assert "ran out of memory (run: " in error.message  # the stage and the engine's line
    assert "decode() failed: std::bad_alloc" in error.message
    assert "2 slots × 1,024 tokens" in error.message
    assert "still out of memory after 0 smaller plans" in error.message
    assert "engine memory limit" in (error.hint or "")
    assert any(isinstance(e, ev.Failed) and e.error is error for e in seen)
    assert not misses()
