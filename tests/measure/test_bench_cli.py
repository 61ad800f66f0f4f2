"""``homelab bench`` as a person runs it: against the engine ``homelab serve`` started (and
its gate), the result stored and shown by ``homelab plan``; Ctrl-C; clear errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from homelab.engine.supervision.state_file import StateFile
from homelab.measure.store import folder
from tests.engine.supervisor_child import REPO, run_homelab, script_env, serve_on_a_free_port
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine

CPU_PLAN = ["--ctx", "1024", "--parallel", "2"]
"""A plan for system RAM (no --vram): the engine runs with -ngl 0, the card is this CPU."""
TINY = ["--prompt-tokens", "16", "--max-tokens", "2", "--turns", "1"]


def test_bench_the_served_engine_and_its_gate_then_plan_shows_it(
    smollm2_gguf: Path,
    engines,
    gates,
    tmp_path: Path,
) -> None:
    served, _port = serve_on_a_free_port(str(smollm2_gguf), *CPU_PLAN, "--detach")
    assert served.returncode == 0, served.stdout + served.stderr
    record = StateFile().read()
    assert record is not None
    engines.track(record.pid)
    try:
        picture = tmp_path / "bench.svg"
        result = run_homelab("bench", "--workload", "agent", "--concurrency", "1", *TINY,
                             "--json", "--svg", str(picture))  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
        data = json.loads(result.stdout)
        assert data["engine_url"] == record.url and data["gate_url"] == record.gate_url
        (level,) = data["results"]
        assert level["requests"] == 1 and level["ttft_s"]["p50"] > 0
        assert level["gate"]["requests"] == 1 and level["gate"]["ttft_s"]["p50"] > 0  # both shown
        assert data["stored"] and Path(data["stored"]).parent == folder()
        svg = picture.read_text()
        assert svg.startswith("<svg") and "Time to first token" in svg and "<polyline" not in svg

        human = run_homelab("bench", "--workload", "chat", "--concurrency", "1", *TINY)
        assert human.returncode == 0, human.stderr
        assert "verdict:" in human.stdout and "gate TTFT p50" in human.stdout
        assert "stored:" in human.stdout

        plan = run_homelab("plan", str(smollm2_gguf), *CPU_PLAN)
        assert plan.returncode == 0, plan.stderr
        lines = [line for line in plan.stdout.splitlines() if "measured:" in line]
        assert len(lines) == 2, plan.stdout  # the agent bench and the chat bench
        assert lines[0].startswith("memory holds 2 agents; measured: 1 agent TTFT ")
        assert lines[1].startswith("memory holds 2 chats; measured: 1 chat TTFT ")
        planned = json.loads(run_homelab("plan", str(smollm2_gguf), *CPU_PLAN, "--json").stdout)
        assert planned["measured"] == lines
        other = run_homelab("plan", str(smollm2_gguf), "--ctx", "2048", "--parallel", "2")
        assert "measured:" not in other.stdout  # other flags: not this measurement
    finally:
        stopped = run_homelab("stop")
        assert stopped.returncode == 0, stopped.stderr


def test_no_engine_is_a_clear_error() -> None:
    result = run_homelab("bench")
    assert result.returncode == 6 and "Traceback" not in result.stderr
    assert "No engine to measure: homelab runs no engine now" in result.stderr
    closed = run_homelab("bench", "--url", f"http://127.0.0.1:{free_port()}")
    assert closed.returncode == 6 and "nothing answers at" in closed.stderr
    elsewhere = run_homelab("bench", "--url", "http://192.0.2.1:8080")
    assert elsewhere.returncode == 6 and "this machine only" in elsewhere.stderr


def test_ctrl_c_prints_what_completed(engine_url: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "homelab", "bench", "--url", engine_url, "--workload", "chat",
         "--concurrency", "1,2,4", "--prompt-tokens", "16", "--max-tokens", "2", "--json"],
        cwd=REPO, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # progress: interrupt once the second level has begun
        seen.append(line)
        if "2 at once (engine)" in line:
            os.kill(proc.pid, signal.SIGINT)
            break
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, "".join(seen) + err
    assert "Traceback" not in err and "stopping; keeping what completed" in err
    data = json.loads(out)
    assert data["complete"] is False and data["stopped"] == "cancelled"
    assert data["results"][0]["concurrency"] == 1 and data["results"][0]["complete"] is True
    assert data["stored"] is None  # a cancelled bench is not kept


def test_engine_dying_mid_run_is_an_engine_error(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    from tests.engine.live_server import start_server, stop_server, wait_ready

    port = free_port()
    log = tmp_path / "engine.log"
    server = start_server(llama_server_bin, smollm2_gguf, port, ["-c", "1024", "-ngl", "0"], log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, server, log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "homelab", "bench", "--url", url, "--workload", "chat",
             "--concurrency", "1", "--turns", "3", "--prompt-tokens", "16", "--max-tokens", "16",
             "--json"],
            cwd=REPO, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        for line in proc.stderr:
            if "1/3 done" in line:
                server.kill()  # the engine dies under the bench
                break
        out, err = proc.communicate(timeout=120)
    finally:
        stop_server(server)
    assert proc.returncode == 6, err
    assert "Engine lost during the bench" in err and "Traceback" not in err
    data = json.loads(out)  # what completed before is still printed
    assert data["complete"] is False and data["stopped"] == "Engine lost during the bench"
    (level,) = data["results"]
    assert level["requests"] == 1 and level["planned"] == 3 and level["complete"] is False
