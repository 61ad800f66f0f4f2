"""Heal for real: llama-server under an address-space cap (``engine_memory_limit``, RLIMIT_AS)
cannot allocate the KV pool of the plan (32 slots × 8k of SmolLM2 on a 16 GiB RAM budget is
3 GiB of KV), exits with its own allocation-failure lines, and the serve session restarts it
on smaller plans until one loads; the miss is in the calibration store, and the next plan of
that model, card and limit starts at the setting that held, without a heal.

Real llama-server (b11312 CPU build), real SmolLM2, nothing edited: the allocation fails in
the engine because the kernel refuses the address space.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.kinds import engine_kind
from homelab.engine.options import plan_options
from homelab.engine.supervision.states import RestartPolicy
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.calibration_miss import lookup_miss, misses
from homelab.serve import events as ev
from homelab.serve import heal
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.factory.server_log import free_port
from tests.prove.lazy_memory import serve_ready

pytestmark = pytest.mark.engine

LIMIT = 1536 << 20
"""1.5 GiB of address space: SmolLM2's weights (92 MiB, mapped) load, 3 GiB of KV cannot."""
RAM = GpuReport(
    source="cpu",
    devices=(),
    cpu=CpuMemory(total=16 << 30, available=16 << 30),
    note="a fixed 16 GiB of RAM (the test's card)",
)
FAST = RestartPolicy(max_crashes=8, window_s=600, backoff_first_s=0.1, backoff_max_s=0.4)


def _request(model: Path, **options) -> ServeRequest:
    opts = plan_options(engine_memory_limit=LIMIT, port=free_port(), **options)
    return ServeRequest(str(model), opts, report=RAM, start_timeout_s=120)


def _serve(request: ServeRequest, engines) -> tuple[ServeSession, list]:
    return serve_ready(request, engines)


def test_an_allocation_that_fails_heals_to_a_smaller_plan_and_the_next_plan_uses_it(
    smollm2_gguf: Path, engines
) -> None:
    first = engine_kind("llama.cpp").plan(str(smollm2_gguf), RAM, plan_options())
    assert first.facts.slots == 32  # what the memory answer alone gives (3 GiB of KV)

    session, seen = _serve(_request(smollm2_gguf), engines)

    healing = [e for e in seen if isinstance(e, ev.Healing)]
    assert healing, "the capped engine loaded its 3 GiB KV pool: the cap did not bite"
    assert all(h.stage == "load" for h in healing)
    assert healing[0].was.slots == 32 and healing[0].now.slots == 16  # fewer slots first
    assert [h.now.slots for h in healing] == [32 >> i for i in range(1, len(healing) + 1)]
    assert all(h.now.ctx_per_slot == 8192 for h in healing)  # each slot keeps its context
    # the engine's own words, from its real log (the aligned malloc the kernel refused)
    assert "insufficient memory" in healing[0].said or "failed to allocate" in healing[0].said
    log = Path(seen[[type(e) for e in seen].index(ev.Started)].log_path).read_text()
    assert "failed to allocate buffer for kv cache" in log

    healed = [e for e in seen if isinstance(e, ev.Healed)]
    assert len(healed) == 1 and healed[0].recorded
    worked = healed[0].worked
    assert worked.slots == healing[-1].now.slots < 32
    assert session.plan is not None and session.plan.facts.slots == worked.slots
    names = [type(e).__name__ for e in seen]
    assert names.index("Healed") < names.index("Ready")  # said before it is announced
    # each healed crash restarts at once on the smaller plan: no backoff, no crash loop
    changes = [e.transition for e in seen if isinstance(e, ev.EngineChanged)]
    restarts = [t.reason for t in changes if t.state.value == "restarting"]
    assert restarts == ["restarting on the new plan"] * len(healing)

    # the calibration store has the miss: what failed, what held, under which cap
    (miss,) = misses()
    assert miss.key.memory_limit == LIMIT and miss.key.device == "cpu"
    assert miss.key.card_total == 16 << 30
    assert {f.slots for f in miss.failed} == {h.was.slots for h in healing}
    assert miss.worked == worked and miss.stage == "load"

    # the next plan of this model, card and cap starts where it held ...
    nxt = engine_kind("llama.cpp").plan(str(smollm2_gguf), RAM, _request(smollm2_gguf).options)
    assert nxt.facts.slots == worked.slots
    assert any("ran out of memory" in w for w in nxt.plan.warnings)
    assert lookup_miss(miss.key) == miss
    # ... a plan without the cap is another key: the memory answer stands
    assert engine_kind("llama.cpp").plan(str(smollm2_gguf), RAM, plan_options()).facts.slots == 32
    # ... and slots asked for explicitly are not overruled
    asked = plan_options(engine_memory_limit=LIMIT, slots=16)
    assert engine_kind("llama.cpp").plan(str(smollm2_gguf), RAM, asked).facts.slots == 16

    # and serving it again is right first time: no heal, the held setting planned first
    _, again = _serve(_request(smollm2_gguf), engines)
    assert not [e for e in again if isinstance(e, ev.Healing)]
    planned = next(e for e in again if isinstance(e, ev.Planned))
    assert planned.plan.facts.slots == worked.slots
    assert any(isinstance(e, ev.Ready) for e in again)


def test_heal_gives_up_after_its_steps_naming_what_was_tried(
    smollm2_gguf: Path, engines, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(heal, "MAX_STEPS", 1)  # one smaller plan (16 slots: 1.5 GiB of KV)
    session = ServeSession(_request(smollm2_gguf), policy=FAST)
    seen: list = []
    session.subscribe(seen.append)
    try:
        session.start()
        engines.track(session.supervisor.pid if session.supervisor else None)
        with pytest.raises(heal.HealError) as raised:
            session.wait_ready()
    finally:
        session.end()
        session.close()
    message = raised.value.message
    assert "32 slots × 8,192 tokens, 16 slots × 8,192 tokens" in message
    assert "still out of memory after 1 smaller plans" in message
    assert "engine memory limit" in (raised.value.hint or "")
    assert [e.now.slots for e in seen if isinstance(e, ev.Healing)] == [16]
    assert any(isinstance(e, ev.Failed) for e in seen)
    assert not misses()  # nothing held: no miss recorded as healed
    assert session.supervisor is not None and session.supervisor.wait_stopped(30)
