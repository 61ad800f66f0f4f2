"""``homelab serve / stop / status`` end to end: real processes, real llama-server (SmolLM2).

Planned against a synthetic 8 GiB card (``--vram``), with a small context so the
CPU engine loads in a moment.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.state_file import StateFile
from tests.engine.supervisor_child import REPO, run_homelab, script_env, serve_on_a_free_port
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine
PLAN = ["--vram", "8GiB", "--ctx", "512", "--parallel", "1"]


class Serving:
    """An attached ``homelab serve`` whose output is read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "homelab", "serve", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env=script_env(),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout_s: float = 120) -> re.Match[str]:
        while True:
            try:
                line = self.lines.get(timeout=timeout_s)
            except queue.Empty:
                pytest.fail(
                    f"no line matching {pattern!r} within {timeout_s} s; saw:\n"
                    + "\n".join(self.seen)
                )
            if line is None:
                pytest.fail(f"serve exited before {pattern!r}; saw:\n" + "\n".join(self.seen))
            self.seen.append(line)
            if (match := re.search(pattern, line)) is not None:
                return match

    def finish(self, timeout_s: float = 60) -> tuple[int, str]:
        code = self.proc.wait(timeout_s)
        while (line := self.lines.get(timeout=10)) is not None:
            self.seen.append(line)
        return code, "\n".join(self.seen)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_serve_reports_ready_then_stops_cleanly_on_a_signal(
    smollm2_gguf: Path, engines, signum: int
) -> None:
    serving = Serving(str(smollm2_gguf), *PLAN, "--port", str(free_port()))
    try:
        pid = int(serving.wait_for(r"^pid (\d+), log ").group(1))
        engines.track(pid)
        url = serving.wait_for(r"^ready: (http://127\.0\.0\.1:\d+) \(llama-server pid").group(1)
        serving.wait_for(r"^predicted vs actual")
        serving.wait_for(r"^ready · \d+ processing · \d+ deferred")  # the live status line
        assert httpx.get(f"{url}/health", timeout=10, trust_env=False).status_code == 200
        serving.proc.send_signal(signum)
        code, output = serving.finish()
    finally:
        serving.kill()
    assert code == 0, output
    assert "stopping..." in output and output.rstrip().endswith("stopped")
    assert "-c 512 -np 1" in output and "Fits." in output  # the plan was printed first
    assert not alive(pid) and StateFile().read() is None


def test_detach_adopt_status_replace_stop(smollm2_gguf: Path, engines) -> None:
    # the engine itself on the public port (the gate in front: tests/gate_serve)
    first, chosen = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach", "--no-gate")
    port = str(chosen)
    assert first.returncode == 0, first.stderr
    assert (
        f"ready: http://127.0.0.1:{port}" in first.stdout
        and "left running (detached)" in first.stdout
    )
    pid = StateFile().read().pid
    engines.track(pid)
    assert alive(pid)

    again = run_homelab("serve", str(smollm2_gguf), *PLAN, "--detach", "--no-gate")
    assert again.returncode == 0, again.stderr
    assert f"already served at http://127.0.0.1:{port}" in again.stdout  # by its keeper
    assert StateFile().read().pid == pid  # not a second engine

    status = run_homelab("status", "--json")
    data = json.loads(status.stdout)
    assert data["running"] and data["pid"] == pid and data["detached"]
    assert data["url"] == f"http://127.0.0.1:{port}" and data["health"]["state"] == "ready"
    assert data["backend"] == "CPU only (no GPU device) (built for CPU)"  # the real CPU build
    assert "  backend: CPU only (no GPU device)" in run_homelab("status").stdout

    replaced = run_homelab(
        "serve", str(smollm2_gguf), *PLAN, "--port", port, "--detach", "--replace", "--no-gate"
    )
    assert replaced.returncode == 0, replaced.stderr
    assert f"replacing llama-server pid {pid}" in replaced.stdout
    new_pid = StateFile().read().pid
    engines.track(new_pid)
    assert new_pid != pid and not alive(pid) and alive(new_pid)

    stopped = run_homelab("stop")
    assert stopped.returncode == 0 and f"stopped: llama-server pid {new_pid}" in stopped.stdout
    assert not alive(new_pid)
    assert run_homelab("stop").stdout.strip() == "no homelab engine is running"
    assert "no homelab engine is running" in run_homelab("status").stdout


def test_serve_refuses_a_second_model(smollm2_gguf: Path, engines, tmp_path: Path) -> None:
    first, _ = serve_on_a_free_port(str(smollm2_gguf), *PLAN, "--detach")
    assert first.returncode == 0, first.stderr
    engines.track(StateFile().read().pid)
    other = tmp_path / "other.gguf"
    other.write_bytes(smollm2_gguf.read_bytes())
    refused = run_homelab("serve", str(other), *PLAN)
    assert refused.returncode == 6
    assert (
        "Engine already running" in refused.stderr
        and "already serves another model" in refused.stderr
    )
    assert "Traceback" not in refused.stderr
    assert run_homelab("stop").returncode == 0


def test_serve_of_a_damaged_model_fails_with_the_engine_words(
    smollm2_gguf: Path, tmp_path: Path
) -> None:
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(smollm2_gguf.read_bytes()[:3_000_000])
    result = run_homelab("serve", str(truncated), *PLAN, "--port", str(free_port()))
    assert result.returncode == 4, result.stderr
    assert "homelab: Bad model file: not restarting" in result.stderr
    assert "data is not within the file bounds" in result.stderr
    assert "Traceback" not in result.stderr
    assert StateFile().read() is None


def test_serve_narrates_a_crash_and_the_restart(smollm2_gguf: Path, engines) -> None:
    serving = Serving(str(smollm2_gguf), *PLAN, "--port", str(free_port()))
    try:
        first = int(serving.wait_for(r"^pid (\d+), log ").group(1))
        engines.track(first)
        serving.wait_for(r"^ready: http")
        os.kill(first, signal.SIGKILL)
        serving.wait_for(r"^crashed: llama-server was killed by SIGKILL")
        serving.wait_for(r"^restart in 1\.0 s \(1 crash\(es\) in the last 600 s\)")
        again = serving.wait_for(r"^ready again: http://127\.0\.0\.1:\d+ \(pid (\d+), ready in")
        second = int(again.group(1))
        engines.track(second)
        assert second != first and alive(second) and StateFile().read().pid == second
        serving.proc.send_signal(signal.SIGINT)
        code, output = serving.finish()
    finally:
        serving.kill()
    assert code == 0, output
    assert not alive(second)
