"""``homelab serve --engine-memory-limit`` end to end: the real engine cannot allocate its
KV under the cap, ``serve`` says what happened and what changed, heals, records the miss,
``status --json`` reports the heal, and the next ``homelab plan`` under the same cap starts
there. Real processes, real llama-server, real SmolLM2, a synthetic 16 GiB card."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port

pytestmark = pytest.mark.engine
CARD = ["--vram", "16GiB"]


def test_serve_heals_under_an_engine_memory_limit_and_status_says_so(
    smollm2_gguf: Path, engines
) -> None:
    model = str(smollm2_gguf)
    result, _port = serve_on_a_free_port(
        model, *CARD, "--no-gate", "--detach", "--engine-memory-limit", "1.5GiB"
    )
    try:
        out = result.stdout
        assert result.returncode == 0, result.stderr + out
        assert "out of memory (load): " in out
        assert "healing 1/4: 32 slots × 8,192 tokens → 16 slots × 8,192 tokens" in out
        assert "healed: " in out and "recorded the miss in the calibration store" in out
        # what happened and what changed, then the restart: no stale crash line and hint
        assert "restarting on the new plan" in out
        assert out.index("healing 1/4") < out.index("restarting on the new plan")
        assert "crashed:" not in out + result.stderr
        status = json.loads(run_homelab("status", "--json").stdout)
        engines.track(status["pid"])
        healed = status["launch"]["healed"]
        assert healed["stage"] == "load" and healed["recorded"] is True
        assert [f["slots"] for f in healed["failed"]][:2] == [32, 16]  # in the order tried
        assert status["plan"]["slots"] == healed["worked"]["slots"] < 32
        assert status["launch"].get("proof") is None  # the proof is off for a synthetic card
    finally:
        stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not alive(status["pid"])

    planned = run_homelab("plan", model, *CARD, "--engine-memory-limit", "1.5GiB")
    assert planned.returncode == 0, planned.stderr
    assert f"-np {healed['worked']['slots']} " in planned.stdout
    assert "ran out of memory" in planned.stdout + planned.stderr
    assert "-np 32 " in run_homelab("plan", model, *CARD).stdout  # no cap: another key


def test_a_memory_limit_that_is_not_a_size_is_refused_by_name(smollm2_gguf: Path) -> None:
    result = run_homelab("serve", str(smollm2_gguf), *CARD, "--engine-memory-limit", "lots")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--engine-memory-limit" in result.stderr and "not a size" in result.stderr
    result = run_homelab("serve", str(smollm2_gguf), *CARD, "--engine-memory-limit", "1MiB")
    assert result.returncode == 2
    assert "engine memory limit must be at least 64 MiB" in result.stderr
