"""``homelab bench`` measures the decode rate the plan's estimate bounds: before a bench the
plan says "≤ N tok/s, estimate" (or unknown, with RAM not measured yet); the bench measures
system RAM once and the engine's decode rate, stores both, and the plan then shows the
measured rate in place of the estimate, at those flags only. A real llama-server on the CPU
with SmolLM2; no speed is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.engine.supervision.state_file import StateFile
from homelab.gpu import ram_bandwidth
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port

pytestmark = pytest.mark.engine

CPU_PLAN = ["--ctx", "1024", "--parallel", "2"]
BENCH = ["--workload", "chat", "--concurrency", "1", "--prompt-tokens", "16",
         "--max-tokens", "8", "--turns", "1"]  # fmt: skip


def _decode(model: Path, *flags: str) -> dict:
    planned = run_homelab("plan", str(model), *flags, "--json")
    assert planned.returncode == 0, planned.stderr
    return json.loads(planned.stdout)["decode"]


def test_bench_stores_the_decode_rate_and_the_plan_shows_it(smollm2_gguf: Path, engines) -> None:
    before = _decode(smollm2_gguf, *CPU_PLAN)
    assert before["estimate"] is True and before["tokens_per_s_max"] is None
    assert "not measured yet" in before["unknown"]  # RAM's bandwidth: unknown, not a guess
    served, _port = serve_on_a_free_port(str(smollm2_gguf), *CPU_PLAN, "--detach", "--no-gate")
    assert served.returncode == 0, served.stdout + served.stderr
    record = StateFile().read()
    assert record is not None
    engines.track(record.pid)
    try:
        bench = run_homelab("bench", *BENCH, "--json")
        assert bench.returncode == 0, bench.stderr
        assert "Traceback" not in bench.stderr
        (level,) = json.loads(bench.stdout)["results"]
        decode_tps = level["decode_tps"]["p50"]
        assert decode_tps > 0
        stored = ram_bandwidth.load()
        assert stored is not None and stored.bytes_per_s > 0  # measured once, kept

        after = _decode(smollm2_gguf, *CPU_PLAN)
        assert after["estimate"] is False and after["measured_tokens_per_s"] == decode_tps
        assert after["sides"][0]["bandwidth"] == stored.bytes_per_s
        assert after["tokens_per_s_max"] > 0  # the estimate is still in the JSON, beside it
        shown = run_homelab("plan", str(smollm2_gguf), *CPU_PLAN)
        assert "tok/s measured (homelab bench" in shown.stdout, shown.stdout
        assert "Decode speed, estimate" not in shown.stdout

        other = _decode(smollm2_gguf, "--ctx", "2048", "--parallel", "2")  # other flags
        assert other["estimate"] is True and other["tokens_per_s_max"] > 0
        again = run_homelab("bench", *BENCH, "--no-store")
        assert again.returncode == 0, again.stderr
        assert "measuring system RAM" not in again.stderr  # once: not measured again
    finally:
        stopped = run_homelab("stop")
        assert stopped.returncode == 0, stopped.stderr
