"""The engine behind homelab's gate has its own key (issue 22, "Trust"): real processes, the
real llama-server (SmolLM2) behind the real gate, on loopback.

The engine's internal port used to answer anyone on the machine, past the gate's key and
budget. Now it answers 401 to a request without its key, the gate (which alone holds the
key, with the state file's 0600 record) answers through it, the key is on no command line,
and ``status``, an adopting ``serve`` and a restart by the supervisor all keep working.
"""

from __future__ import annotations

import json
import signal
import stat
from pathlib import Path

import httpx
import psutil
import pytest

from homelab.engine.engine_key import is_engine_key
from homelab.engine.supervision.state_file import StateFile
from homelab.paths import state_dir
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port
from tests.engine.test_supervisor_cli import Serving
from tests.factory.server_log import free_port
from tests.gate_serve.helpers import PLAN, chat, gate_processes, kill_keeper, wait_gates_gone

pytestmark = pytest.mark.engine


def _refused_without_key(engine_url: str) -> None:
    """The engine's own port: 401 to a chat and to ``/slots`` without its key."""
    answer = chat(engine_url)
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["type"] == "authentication_error"
    slots = httpx.get(f"{engine_url}/slots", timeout=10, trust_env=False)
    assert slots.status_code == 401, slots.text
    for path in ("/props", "/metrics", "/v1/models", "/models"):
        assert httpx.get(f"{engine_url}{path}", timeout=10, trust_env=False).status_code == 401
    counted = httpx.post(
        f"{engine_url}/tokenize", json={"content": "hi"}, timeout=10, trust_env=False
    )
    assert counted.status_code == 401
    for path in ("/health", "/v1/health"):  # llama-server b11312's only open routes
        assert httpx.get(f"{engine_url}{path}", timeout=10, trust_env=False).status_code == 200
    wrong = httpx.get(
        f"{engine_url}/slots", headers={"Authorization": "Bearer nope"}, timeout=10, trust_env=False
    )
    assert wrong.status_code == 401


def _key_on_no_command_line(key: str) -> None:
    for process in psutil.process_iter(["cmdline"]):
        assert key not in " ".join(process.info["cmdline"] or []), process.pid


def _status() -> dict:
    result = run_homelab("status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_detached_engine_answers_its_gate_alone(smollm2_gguf: Path, engines, gates) -> None:
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    record = StateFile().read()
    engines.track(record.pid)
    public = f"http://127.0.0.1:{port}"
    key = record.api_key
    assert is_engine_key(key)
    mode = stat.S_IMODE(StateFile().path.stat().st_mode)
    assert mode == 0o600, f"{mode:04o}"

    _refused_without_key(record.url)
    keyed = httpx.get(
        f"{record.url}/slots",
        headers={"Authorization": f"Bearer {key}"},
        timeout=10,
        trust_env=False,
    )
    assert keyed.status_code == 200, keyed.text  # the key the record holds is the engine's
    answer = chat(public)  # the gate sends it
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]
    assert httpx.get(f"{public}/slots", timeout=10, trust_env=False).status_code == 200
    assert httpx.get(f"{public}/props", timeout=10, trust_env=False).status_code == 200

    _key_on_no_command_line(key)
    (gate,) = gate_processes()
    assert key not in " ".join(gate.cmdline())
    assert key in psutil.Process(record.pid).environ().get("LLAMA_API_KEY", "")
    said = first.stdout + first.stderr
    logs = "".join(p.read_text(errors="replace") for p in (state_dir() / "logs").glob("*.log"))
    assert key not in said and key not in logs

    status = _status()  # status asks the engine's /slots itself, with the record's key
    assert status["health"]["state"] == "ready"
    assert "slots 0/1 busy" in status["status_line"], status["status_line"]

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already served at" in again.stdout  # its keeper keeps it
    after = StateFile().read()
    assert (after.pid, after.api_key) == (record.pid, key)
    assert chat(public).status_code == 200

    stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert wait_gates_gone(5)


def test_a_repaired_gate_gets_the_key_again(smollm2_gguf: Path, engines, gates) -> None:
    """The gate dies; the serve that starts it again reads the engine's key from the record
    (or it would forward into 401s)."""
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    record = StateFile().read()
    engines.track(record.pid)
    kill_keeper()  # else the keeper starts the gate again itself
    (gate,) = gate_processes()
    gate.kill()
    gate.wait(10)
    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "is gone: starting it again there" in again.stdout
    answer = chat(f"http://127.0.0.1:{port}")
    assert answer.status_code == 200, answer.text
    _refused_without_key(record.url)
    assert run_homelab("stop").returncode == 0
    assert wait_gates_gone(5)


def test_an_engine_restarted_by_the_supervisor_keeps_its_key(
    smollm2_gguf: Path, engines, gates
) -> None:
    port = free_port()
    serving = Serving(str(smollm2_gguf), *PLAN, "--port", str(port))
    try:
        engines.track(int(serving.wait_for(r"^pid (\d+), log ").group(1)))
        gate_url = serving.wait_for(r"^gate: (http://127\.0\.0\.1:\d+) in front of").group(1)
        first = StateFile().read()
        assert chat(gate_url).status_code == 200
        psutil.Process(first.pid).kill()  # a crash: the supervisor starts it again
        again = serving.wait_for(r"^ready again: http://127\.0\.0\.1:\d+ \(pid (\d+)", 180)
        engines.track(int(again.group(1)))
        after = StateFile().read()
        assert after.pid == int(again.group(1)) != first.pid
        assert after.api_key == first.api_key
        _refused_without_key(after.url)
        answer = chat(gate_url)
        assert answer.status_code == 200, answer.text
        serving.proc.send_signal(signal.SIGINT)
        code, output = serving.finish()
    finally:
        serving.kill()
    assert code == 0, output
    assert first.api_key not in output


def test_a_record_that_lost_the_key_is_adopted_with_the_engines_own(
    smollm2_gguf: Path, engines, gates
) -> None:
    """An edited state file without the key: the adopter reads the key the engine was given
    (its environment, owner-only) and serves through the gate again."""
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    path = StateFile().path
    data = json.loads(path.read_text())
    engines.track(data["pid"])
    key = data.pop("api_key")
    path.write_text(json.dumps(data))
    kill_keeper()  # a serve adopts it (a keeper would restart the gate itself)
    (gate,) = gate_processes()
    gate.kill()
    gate.wait(10)
    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Traceback" not in again.stderr
    assert StateFile().read().api_key == key
    assert chat(f"http://127.0.0.1:{port}").status_code == 200
    assert run_homelab("stop").returncode == 0
    assert wait_gates_gone(5)


def test_a_garbled_key_is_a_clear_error_then_a_fresh_key(
    smollm2_gguf: Path, engines, gates
) -> None:
    """A key in the record that homelab cannot have made: the record is set aside (said), the
    engine is named, and ``--replace`` starts a fresh engine with a fresh key."""
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stdout + first.stderr
    path = StateFile().path
    data = json.loads(path.read_text())
    engines.track(data["pid"])
    old_key, data["api_key"] = data["api_key"], "garbled, with spaces"
    path.write_text(json.dumps(data))
    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach")
    said = again.stdout + again.stderr
    assert again.returncode != 0, said
    assert "Traceback" not in said and "api_key" in said and "garbled" not in said
    replaced = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach", "--replace")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    record = StateFile().read()
    engines.track(record.pid)
    assert record.pid != data["pid"] and is_engine_key(record.api_key)
    assert record.api_key != old_key
    assert chat(f"http://127.0.0.1:{record.public_port}").status_code == 200
    assert run_homelab("stop").returncode == 0
    assert wait_gates_gone(5)


def test_no_gate_keeps_the_engine_without_a_key(smollm2_gguf: Path, engines, gates) -> None:
    first, port = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach", "--no-gate")
    assert first.returncode == 0, first.stdout + first.stderr
    record = StateFile().read()
    engines.track(record.pid)
    assert record.api_key is None and "LLAMA_API_KEY" not in psutil.Process(record.pid).environ()
    assert chat(f"http://127.0.0.1:{port}").status_code == 200
    assert run_homelab("stop").returncode == 0
