"""homelab finds its own engines without their record, and adopts only what runs as asked.

End to end as a person types it (``python -m homelab``), real llama-server (SmolLM2):

- a detached engine whose record was deleted or corrupted is still seen by ``status``,
  stopped by ``stop``, and ``serve`` refuses to start a second one beside it (or replaces
  it when asked);
- ``serve`` of a running model with other settings (context, slots, cache types, a pinned
  port) refuses and names them, instead of silently adopting.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.engine.supervision.identity import find_engines
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port

pytestmark = pytest.mark.engine
PLAN = ["--vram", "8GiB", "--ctx", "512", "--parallel", "1"]


def _detached(model: Path, engines, *extra: str) -> tuple[int, int]:
    result, port = serve_on_a_free_port(str(model), *PLAN, "--detach", *extra)
    assert result.returncode == 0, result.stderr
    pid = StateFile().read().pid
    engines.track(pid)
    return pid, port


@pytest.mark.parametrize("damage", ["delete", "null", "directory"])
def test_an_engine_without_its_record_is_found_stopped_and_never_doubled(
    smollm2_gguf: Path, engines, damage: str
) -> None:
    pid, _ = _detached(smollm2_gguf, engines)
    store = StateFile()
    store.path.unlink()
    if damage == "null":
        store.path.write_text("null")
    elif damage == "directory":
        store.path.mkdir()

    status = run_homelab("status", "--json")
    assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
    data = json.loads(status.stdout)
    assert data["running"] is True and [e["pid"] for e in data["unrecorded"]] == [pid]

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 6, again.stdout + again.stderr
    assert "runs without a readable record" in again.stderr and "--replace" in again.stderr
    assert [e.pid for e in find_engines(store.path)] == [pid]  # no second engine

    stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"pid {pid} (it had no readable record)" in stopped.stdout
    assert not alive(pid) and find_engines(store.path) == []
    assert run_homelab("stop").stdout.strip() == "no homelab engine is running"


def test_replace_stops_an_unrecorded_engine_first(smollm2_gguf: Path, engines) -> None:
    pid, _ = _detached(smollm2_gguf, engines)
    StateFile().path.write_text('{"version": 1, "pid": "garbage"}')
    replaced, _ = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach", "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert f"replacing llama-server pid {pid} (no record)" in replaced.stdout
    new_pid = StateFile().read().pid
    engines.track(new_pid)
    assert new_pid != pid and not alive(pid)
    assert [e.pid for e in find_engines(StateFile().path)] == [new_pid]
    assert run_homelab("stop").returncode == 0 and not alive(new_pid)


def test_serve_with_other_settings_refuses_and_names_them(smollm2_gguf: Path, engines) -> None:
    pid, port = _detached(smollm2_gguf, engines)
    model = str(smollm2_gguf)

    other = run_homelab("serve", model, "--vram", "8GiB", "--ctx", "1024", "--parallel", "2")
    assert other.returncode == 6, other.stderr
    assert "runs with context 512 × 1 slots; you asked 1024 × 2" in other.stderr
    assert "--replace restarts it with the new settings" in other.stderr
    cache = run_homelab("serve", model, *PLAN, "--cache-type", "f16")
    assert cache.returncode == 6 and "K cache q8_0, V cache q8_0" in cache.stderr
    pinned = run_homelab("serve", model, *PLAN, "--port", str(port + 1))
    assert pinned.returncode == 6 and f"port {port}; you asked port {port + 1}" in pinned.stderr
    assert "Traceback" not in other.stderr + cache.stderr + pinned.stderr
    assert StateFile().read().pid == pid and alive(pid)  # nothing was touched

    same = run_homelab("serve", model, *PLAN, "--port", str(port), "--detach")
    assert same.returncode == 0 and "already served at" in same.stdout  # by its keeper

    replaced = run_homelab(
        "serve",
        model,
        "--vram",
        "8GiB",
        "--ctx",
        "1024",
        "--parallel",
        "2",
        "--detach",
        "--replace",
    )
    assert replaced.returncode == 0, replaced.stderr
    record = StateFile().read()
    engines.track(record.pid)
    assert record.pid != pid and not alive(pid)
    assert (record.facts.ctx_total, record.facts.slots) == (1024, 2)
    status = json.loads(run_homelab("status", "--json").stdout)
    assert status["plan"]["ctx_total"] == 1024 and status["engine"]["kind"] == "llama.cpp"
    assert status["program"] == "llama-server" and status["health"]["state"] == "ready"
    assert run_homelab("stop").returncode == 0 and not alive(record.pid)
