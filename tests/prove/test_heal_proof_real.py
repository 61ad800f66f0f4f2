"""Heal in the launch proof, for real: an engine memory limit (RLIMIT_AS) that holds the
plan's load but not the lazy work buffer of its first full batch (see
:mod:`tests.prove.lazy_memory`, which measures the cap on this build). ``serve`` with the
proof on: the engine is ready, the proof fills the largest slot at full micro-batch, the
engine answers HTTP 500 ``decode() failed: std::bad_alloc``; the session restarts it on
fewer slots (then less context), the smaller plan passes its proof, the miss is recorded
at stage "proof", and the next plan of that model under that limit starts there.

Real llama-server (b11312 CPU build), real SmolLM2, nothing edited.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.kinds import engine_kind
from homelab.engine.supervision.states import State
from homelab.plan.calibration_miss import misses
from homelab.serve import events as ev
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.prove.lazy_memory import RAM, Lazy, options, serve_ready

pytestmark = pytest.mark.engine


def _serve(model: Path, engines, **more) -> tuple[ServeSession, list]:
    request = ServeRequest(str(model), options(**more), report=RAM, start_timeout_s=120)
    return serve_ready(request, engines)


def test_an_out_of_memory_in_the_proof_heals_to_fewer_slots_and_the_next_plan_starts_there(
    smollm2_gguf: Path, engines, lazy: Lazy
) -> None:
    session, seen = _serve(smollm2_gguf, engines, limit=lazy.cap, prove=True)

    proofs = [e.result for e in seen if isinstance(e, ev.Proved)]
    assert proofs and not proofs[0].ok, f"the first proof held under the cap: {lazy}"
    assert "std::bad_alloc" in (proofs[0].oom or ""), proofs[0]
    assert proofs[-1].ok  # the smaller plan proved
    healing = [e for e in seen if isinstance(e, ev.Healing)]
    assert 1 <= len(healing) <= 2 and all(h.stage == "proof" for h in healing)
    assert healing[0].was.slots == 2 and healing[0].now.slots == 1  # fewer slots first
    assert healing[0].now.ctx_per_slot == 1024
    assert "decode() failed: std::bad_alloc" in healing[0].said
    assert len(proofs) == len(healing) + 1  # each plan proved once
    # the restarts were asked for, not crashes: no crash in the supervisor's story
    states = [e.transition.state for e in seen if isinstance(e, ev.EngineChanged)]
    assert State.CRASHED not in states and states.count(State.RESTARTING) == len(healing)
    log = Path(next(e for e in seen if isinstance(e, ev.Started)).log_path).read_text()
    assert "decode() failed: std::bad_alloc" in log  # the engine's own words, in its real log

    healed = [e for e in seen if isinstance(e, ev.Healed)]
    assert len(healed) == 1 and healed[0].recorded
    names = [type(e).__name__ for e in seen]
    assert names.index("Healed") < names.index("Ready")
    (miss,) = misses()
    assert miss.stage == "proof" and miss.key.memory_limit == lazy.cap
    assert [f.slots for f in miss.failed][0] == 2 and miss.worked == healed[0].worked
    assert session.plan is not None and session.plan.facts.slots == miss.worked.slots

    # the next plan of this model under this limit, slots and context left to it, starts
    # at the setting that held; served again, its proof passes first time
    left_to_plan = options(limit=lazy.cap, slots=None, ctx=None)
    nxt = engine_kind("llama.cpp").plan(str(smollm2_gguf), RAM, left_to_plan)
    assert (nxt.facts.slots, nxt.facts.ctx_per_slot) == (
        miss.worked.slots,
        miss.worked.ctx_per_slot,
    )
    assert any("ran out of memory" in w for w in nxt.plan.warnings)
    _, again = _serve(smollm2_gguf, engines, limit=lazy.cap, prove=True, slots=None, ctx=None)
    assert not [e for e in again if isinstance(e, ev.Healing)]
    assert [e.result.ok for e in again if isinstance(e, ev.Proved)] == [True]
