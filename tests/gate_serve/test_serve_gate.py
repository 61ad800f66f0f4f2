"""``homelab serve`` with the admission gate on the public port: real processes, the real
llama-server (SmolLM2) behind the real gate, on loopback.

The gate takes the public port, the engine an internal loopback one; ``status --json``
names both; a chat through the public URL is answered; detached, the gate runs in a
process of its own that the next serve adopts with the engine and ``homelab stop`` stops.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from homelab.engine.supervision.identity import find_engines
from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from homelab.gate.access_log import entry_of_line
from homelab.gate.key_file import key_path
from homelab.paths import state_dir
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port
from tests.engine.test_supervisor_cli import Serving
from tests.factory.server_log import free_port
from tests.gate_serve.helpers import PLAN, chat, gate_processes, kill_keeper, wait_gates_gone

pytestmark = pytest.mark.engine


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _status() -> dict:
    result = run_homelab("status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_detached_gate_answers_is_adopted_and_stopped(smollm2_gguf: Path, engines, gates) -> None:
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    record = StateFile().read()
    engines.track(record.pid)
    public = f"http://127.0.0.1:{port}"
    assert f"gate: {public} in front of the engine at {record.url}" in first.stdout
    assert f"clients use {public}" in first.stdout
    assert record.gate_url == public and record.port != port  # the engine moved inside
    assert record.gate_budget_tokens is not None and record.gate_budget_tokens > 0

    status = _status()
    assert status["gate"]["url"] == public and status["gate"]["running"] is True
    assert status["engine"] == {"url": record.url, "kind": "llama.cpp"}
    assert status["url"] == public and status["health"]["state"] == "ready"
    assert status["gate"]["budget_tokens"] == record.gate_budget_tokens
    assert status["engine"]["url"].startswith("http://127.0.0.1:")
    human = run_homelab("status").stdout
    assert f"gate {public}" in human and f"engine {record.url} (internal)" in human

    answer = chat(public)  # through the gate, to the engine, back
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]
    assert httpx.get(f"{public}/health", timeout=10, trust_env=False).status_code == 200
    live = _status()["gate"]["state"]  # the gate's own numbers, asked of the gate process
    assert live["admitted"] >= 1 and live["running"] == 0 and live["queued"] == 0
    assert live["charged_tokens"] == 0  # the chat's charge was released
    assert live["ceiling_tokens"] == record.gate_budget_tokens
    human = run_homelab("status").stdout
    assert "gate: 0 running · 0 queued" in human and f"admitted {live['admitted']}" in human

    (gate,) = gate_processes()  # the gate outlived the serve that started it
    assert record.gate_pid == gate.pid
    # its log (rotated, rate-limited: homelab.gate.log_file) holds a line per request
    logged = [
        entry
        for log in (state_dir() / "logs").glob("gate-*.log")
        for entry in map(entry_of_line, log.read_text(errors="replace").splitlines())
        if entry is not None
    ]
    assert ("POST", "/v1/chat/completions", 200) in {(e.method, e.path, e.status) for e in logged}

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stderr
    assert f"already served at {public}, kept by homelab's keeper" in again.stdout
    after = StateFile().read()
    assert (after.pid, after.gate_pid) == (record.pid, gate.pid)  # neither started twice
    assert [p.pid for p in gate_processes()] == [gate.pid]
    assert chat(public).status_code == 200

    stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped: the gate at {public}" in stopped.stdout
    assert f"stopped: llama-server pid {record.pid}" in stopped.stdout
    assert not alive(record.pid) and wait_gates_gone(5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{public}/health", timeout=5, trust_env=False)


def test_attached_serve_with_the_gate_stops_both(smollm2_gguf: Path, engines, gates) -> None:
    port = free_port()
    serving = Serving(str(smollm2_gguf), *PLAN, "--port", str(port), "--gate-max-concurrent", "1")
    try:
        engines.track(int(serving.wait_for(r"^pid (\d+), log ").group(1)))
        engine_url = serving.wait_for(r"^ready: (http://127\.0\.0\.1:\d+) \(llama-server").group(1)
        gate_url = serving.wait_for(r"^gate: (http://127\.0\.0\.1:\d+) in front of").group(1)
        limits = serving.wait_for(
            r"^  admits (\d+) tokens at once, up to (\d+) per request, 1 request at once"
        )
        assert _port(gate_url) == port and _port(engine_url) != port
        assert chat(gate_url).status_code == 200
        status = _status()
        assert status["gate"]["url"] == gate_url and status["engine"]["url"] == engine_url
        assert status["gate"]["budget_tokens"] == int(limits.group(2))  # per request
        assert status["gate"]["pid"] == serving.proc.pid  # on a thread of the serve itself
        assert gate_processes() == []  # attached: no process of its own
        serving.proc.send_signal(signal.SIGINT)
        code, output = serving.finish()
    finally:
        serving.kill()
    assert code == 0, output
    assert output.rstrip().endswith("stopped") and StateFile().read() is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{gate_url}/health", timeout=5, trust_env=False)


def test_no_gate_serves_the_engine_on_the_public_port(smollm2_gguf: Path, engines, gates) -> None:
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach", "--no-gate")
    assert first.returncode == 0, first.stderr
    engines.track(StateFile().read().pid)
    assert f"ready: http://127.0.0.1:{port}" in first.stdout and "gate:" not in first.stdout
    status = _status()
    assert status["gate"] is None and status["url"] == f"http://127.0.0.1:{port}"
    assert status["engine"]["url"] == status["url"] and gate_processes() == []
    assert "no gate (the engine serves directly)" in run_homelab("status").stdout
    # a serve that wants the gate finds it kept as it is (served directly, no gate)
    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stderr
    assert f"already served at http://127.0.0.1:{port}, kept by" in again.stdout
    assert run_homelab("stop").returncode == 0


def test_a_taken_public_port_fails_before_any_engine(smollm2_gguf: Path, engines, gates) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_homelab("serve", str(smollm2_gguf), *PLAN, "--port", str(port), "--detach")
    assert result.returncode == 6, result.stdout + result.stderr
    assert "Port in use" in result.stderr and f"port {port} on 127.0.0.1 is in use" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert "starting llama-server" not in result.stdout  # nothing was spawned
    assert StateFile().read() is None and find_engines(StateFile().path) == []
    assert gate_processes() == []


def test_off_loopback_needs_the_key_made_once(smollm2_gguf: Path, engines, gates) -> None:
    # 127.0.0.2 is loopback to the kernel (tests bind nothing else) but not 127.0.0.1: a key
    first, port = serve_on_a_free_port(
        str(smollm2_gguf), *PLAN, "--detach", "--gate-host", "127.0.0.2"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    engines.track(StateFile().read().pid)
    key = key_path().read_text().strip()
    assert stat.S_IMODE(os.stat(key_path()).st_mode) == 0o600
    assert f"made the gate's API key (shown this once; it stays in {key_path()}): {key}" in (
        first.stdout
    )
    public = f"http://127.0.0.2:{port}"
    assert _status()["gate"]["url"] == public
    refused = chat(public)
    assert refused.status_code == 401, refused.text
    assert chat(public, key="not-the-key").status_code == 401
    assert chat(public, key=key).status_code == 200
    assert key not in StateFile().path.read_text()  # never in the record
    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach", "--gate-host", "127.0.0.2")
    assert again.returncode == 0 and key not in again.stdout  # said once only
    assert run_homelab("stop").returncode == 0
    assert wait_gates_gone(5)


def test_gate_settings_errors_stop_the_serve_first(smollm2_gguf: Path, tmp_path: Path) -> None:
    config = Path(os.environ["HOMELAB_CONFIG_DIR"]) / "gate.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("max_concurrent = 'two'\n")
    bad_file = run_homelab("serve", str(smollm2_gguf), *PLAN, "--port", str(free_port()))
    assert bad_file.returncode == 2, bad_file.stderr
    assert "max_concurrent" in bad_file.stderr and str(config) in bad_file.stderr
    assert "Traceback" not in bad_file.stderr and StateFile().read() is None
    config.unlink()
    both = run_homelab("serve", str(smollm2_gguf), *PLAN, "--no-gate", "--gate-budget", "9")
    assert both.returncode == 2 and "--gate-budget" in both.stderr and "--no-gate" in both.stderr
    zero = run_homelab("serve", str(smollm2_gguf), *PLAN, "--gate-max-concurrent", "0")
    assert zero.returncode == 2 and "max_concurrent given to serve" in zero.stderr
    assert StateFile().read() is None


def test_the_unified_pool_case_is_queued_not_failed(smollm2_gguf: Path, engines, gates) -> None:
    # issue 9's case, scaled down for a CPU: 2 slots on one 512-cell pool, three ~200-token
    # chats at once (more than the pool holds); behind the gate (its budget from the plan's
    # facts: the pool × 0.85) two run, the third waits its turn, all are answered
    plan = ["--vram", "8GiB", "--ctx", "512", "--parallel", "2", "--kv-unified"]
    first, port = serve_on_a_free_port(str(smollm2_gguf), *plan, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    engines.track(StateFile().read().pid)
    assert _status()["gate"]["budget_tokens"] == int(512 * 0.85)  # per request: the pool's share
    assert "admits 435 tokens at once, up to 435 per request, 2 requests at once" in first.stdout
    prompt = "The quick brown fox jumps over the lazy dog. " * 20
    public = f"http://127.0.0.1:{port}"

    def ask(_: int) -> int:
        response = httpx.post(
            f"{public}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": prompt}], "max_tokens": 8},
            timeout=300,
            trust_env=False,
        )
        return response.status_code

    with ThreadPoolExecutor(3) as pool:
        codes = list(pool.map(ask, range(3)))
    assert codes == [200, 200, 200]
    metrics = httpx.get(f"{public}/metrics", timeout=30, trust_env=False).text
    assert "homelab_gate_token_budget 435.0" in metrics
    assert run_homelab("stop").returncode == 0


def test_serving_again_repairs_a_detached_gate_that_died(
    smollm2_gguf: Path, engines, gates
) -> None:
    """SIGKILL the gate of a detached serve and the public port is dead; running the same
    ``serve`` again said "no gate" and served nothing there. Now it adopts the engine and
    starts its gate again on the port clients know."""
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    record = StateFile().read()
    engines.track(record.pid)
    public = f"http://127.0.0.1:{port}"
    kill_keeper()  # else the keeper starts the gate again itself (tests/gate_serve/test_keeper.py)
    (gate,) = gate_processes()
    gate.kill()
    gate.wait(10)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{public}/health", timeout=5, trust_env=False)

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "adopting the running detached llama-server" in again.stdout
    assert f"its gate at {public} is gone: starting it again there" in again.stdout
    assert f"gate: {public} in front of the engine at {record.url}" in again.stdout
    after = StateFile().read()
    (repaired,) = gate_processes()  # the new keeper's gate process
    assert after.pid == record.pid and after.gate_pid == repaired.pid != gate.pid
    assert after.gate_url == public and after.gate_budget_tokens == record.gate_budget_tokens
    assert chat(public).status_code == 200

    stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not alive(record.pid) and wait_gates_gone(5)
