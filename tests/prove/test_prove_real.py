"""The launch proof for real: after ready and before ``Ready`` is announced, one request
fills the largest slot's context (token ids from the engine's own tokenizer), and the
proof reports the engine's memory (its RSS on a CPU plan) against the plan's figure.
Real llama-server, real SmolLM2; the engine's own log shows what it was given."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.plan.calibration_miss import predicted_bytes
from homelab.serve import events as ev
from homelab.serve.prove import MARGIN_TOKENS, N_PREDICT, launch_of
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine


def _session(model: Path, **options) -> tuple[ServeSession, list]:
    opts = plan_options(port=free_port(), **options)
    session = ServeSession(ServeRequest(str(model), opts, start_timeout_s=120))
    seen: list = []
    session.subscribe(seen.append)
    return session, seen


def test_the_proof_fills_the_largest_slot_before_ready_is_announced(
    smollm2_gguf: Path, engines
) -> None:
    session, seen = _session(smollm2_gguf, ctx=1024, slots=2, prove=True)
    try:
        session.start()
        engines.track(session.supervisor.pid if session.supervisor else None)
        session.wait_ready()
        assert session.supervisor is not None
        log_path = session.supervisor.log_path
        assert log_path is not None
        launch = launch_of(session.supervisor.pid)  # what `status --json` reports as "launch"
        session.bus.flush()
    finally:
        session.stop(let_go=False)
        session.close()
    names = [type(e).__name__ for e in seen]
    assert names.index("Proving") < names.index("Proved") < names.index("Ready")
    proving = next(e for e in seen if isinstance(e, ev.Proving))
    assert proving.ctx_per_slot == 512  # -c 1024 -np 2: each slot holds 512
    assert proving.prompt_tokens == 512 - MARGIN_TOKENS - N_PREDICT
    result = next(e for e in seen if isinstance(e, ev.Proved)).result
    assert result.ok, result
    assert result.prompt_tokens == proving.prompt_tokens  # the engine's own count agrees
    assert result.memory_source == "process"
    assert result.before_bytes is not None and result.peak_bytes is not None
    assert 0 < result.before_bytes <= result.peak_bytes
    assert session.plan is not None
    assert result.predicted_bytes == predicted_bytes(session.plan.plan)
    assert result.seconds > 0
    assert launch is not None and launch["proof"] == result.as_dict()
    # the engine says so itself: one slot, its whole context, no prompt cache reused
    log = log_path.read_text()
    started = re.findall(
        r"new prompt, n_ctx_slot = (\d+), n_keep = \d+, task.n_tokens = (\d+)", log
    )
    assert started and started[0] == ("512", str(proving.prompt_tokens))


def test_the_proof_is_off_by_default_on_a_cpu_plan(smollm2_gguf: Path, engines) -> None:
    session, seen = _session(smollm2_gguf, ctx=512, slots=1)
    try:
        session.start()
        engines.track(session.supervisor.pid if session.supervisor else None)
        session.wait_ready()
        session.bus.flush()
    finally:
        session.stop(let_go=False)
        session.close()
    assert any(isinstance(e, ev.Ready) for e in seen)
    assert not [e for e in seen if isinstance(e, (ev.Proving, ev.Proved))]
