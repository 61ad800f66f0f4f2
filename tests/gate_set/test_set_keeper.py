"""A set of models detached and kept by homelab's keeper, for real: three small models (a
budget that holds two), ``serve A B C --detach`` returning once the gate listens and the
residents are ready, every model answered through the one URL, an engine SIGKILLed and
restarted by its supervisor (``status`` says so), a second serve of the set told it is
already served, another set or one model refused, ``stop`` leaving no process behind
(checked by pid and start time). A stale record (its pid another process now) or a torn one
is never taken for a running set, nor signalled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from homelab.engine.supervision.process import alive
from homelab.engine.supervision.set_record import set_record_path
from tests.engine.supervisor_child import run_homelab, serve_on_a_free_port
from tests.gate_serve.helpers import processes_with
from tests.gate_serve.test_keeper import _until, keepers  # noqa: F401  (its keepers fixture)
from tests.gate_set.conftest import chat

pytestmark = pytest.mark.engine

PLAN = ("--vram", "2.8GiB", "--workload", "chat", "--sample-seconds", "0")


def _status() -> dict:
    result = run_homelab("status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _engines(keeper: int) -> dict[str, psutil.Process]:
    """The keeper's llama-servers by their model file's name."""
    out: dict[str, psutil.Process] = {}
    with contextlib.suppress(psutil.NoSuchProcess):
        for child in psutil.Process(keeper).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                argv = child.cmdline()
                if "llama-server" in os.path.basename(argv[0]) and "-m" in argv:
                    out[Path(argv[argv.index("-m") + 1]).name] = child
    return out


def _stale_record(pid: int) -> None:
    """A record a killed keeper left, its pid now another (live) process."""
    record = {
        "pid": pid,
        "gate_url": "http://127.0.0.1:9",
        "models": ["ghost"],
        "members": [{"id": "ghost"}],
        "create_time": time.time() - 3600.0,
        "kept": True,
        "restarts": [],
    }
    set_record_path().parent.mkdir(parents=True, exist_ok=True)
    set_record_path().write_text(json.dumps(record), encoding="utf-8")


def test_a_detached_set_is_kept_restarted_and_stopped(
    three_models: dict[str, Path],
    smollm2_gguf: Path,
    keepers,  # noqa: F811
) -> None:
    paths = [str(three_models[k]) for k in ("smol", "llama", "qwen3")]
    bystander = subprocess.Popen(["sleep", "600"])  # a process that took a dead keeper's pid
    try:
        _stale_record(bystander.pid)
        assert "is gone" in run_homelab("status").stdout
        served, port = serve_on_a_free_port(*paths, *PLAN, "--detach")
        assert served.returncode == 0, served.stdout + served.stderr
        assert bystander.poll() is None  # the stale record's pid was never signalled
    finally:
        bystander.kill()
        bystander.wait()
    assert "kept by homelab's keeper" in served.stdout, served.stdout
    url = f"http://127.0.0.1:{port}"
    status = _status()
    keeper = status["keeper"]["pid"]
    assert status["keeper"]["running"] and status["restarts"] == []
    assert status["model_set"]["pid"] == keeper and alive(keeper)
    created = psutil.Process(keeper).create_time()
    assert f"kept by homelab's keeper (pid {keeper})" in run_homelab("status").stdout

    for ident in ("tiny-llama", "tiny-qwen3", status["model_set"]["models"][0], "tiny-llama"):
        answer = chat(url, ident)
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == ident

    again = run_homelab("serve", *paths, *PLAN, "--detach")
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"already served at {url}/v1, kept by homelab's keeper (pid {keeper})" in again.stdout
    other = run_homelab("serve", *paths[:2], *PLAN, "--detach")
    assert other.returncode == 6 and "another set of models" in other.stderr, other
    single = run_homelab("serve", str(smollm2_gguf), "--ctx", "512", "--detach")
    assert single.returncode == 6 and "a set of models" in single.stderr, single

    engines = _engines(keeper)
    assert "tiny-llama.gguf" in engines, engines
    killed = engines["tiny-llama.gguf"]
    killed.send_signal(signal.SIGKILL)
    _until(lambda: _status()["restarts"], "the restart noted")
    back = _until(
        lambda: (e := _engines(keeper).get("tiny-llama.gguf")) and e.pid != killed.pid and e,
        "tiny-llama's engine back",
    )
    answer = chat(url, "tiny-llama")
    assert answer.status_code == 200 and answer.json()["model"] == "tiny-llama", answer.text
    (restart,) = _status()["restarts"]
    assert restart["what"] == "engine" and restart["why"].startswith("tiny-llama: ")
    assert restart["returncode"] == -signal.SIGKILL
    assert "restarted engine at" in run_homelab("status").stdout

    pids = [(keeper, created)] + [(e.pid, e.create_time()) for e in _engines(keeper).values()]
    assert back.pid in [pid for pid, _ in pids]
    stopped = run_homelab("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped: the set of models at {url} (homelab's keeper pid {keeper})" in stopped.stdout
    left = [pid for pid, started in pids if alive(pid, started)]
    assert not left, f"still running after stop: {left}"
    assert not set_record_path().exists()
    assert _status() == {"running": False}


def test_a_stale_or_torn_set_record_is_never_a_running_set() -> None:
    _stale_record(os.getpid())  # our own pid, recorded with another start time
    status = _status()
    assert status["running"] is False and status["model_set"] is None
    assert status["stale_model_set"]["pid"] == os.getpid()
    stopped = run_homelab("stop")
    assert stopped.returncode == 0 and "cleared" in stopped.stdout, stopped
    assert not set_record_path().exists()  # and this process was not signalled

    set_record_path().write_text('{"pid": 1, "gate_url": "http://127.0.0.1:9", "mem', "utf-8")
    assert _status() == {"running": False}
    assert "no homelab engine is running" in run_homelab("stop").stdout


def test_a_killed_keeper_takes_its_engines_and_serve_starts_the_set_again(
    three_models: dict[str, Path],
    keepers,  # noqa: F811
) -> None:
    paths = [str(three_models[k]) for k in ("smol", "llama", "qwen3")]
    served, port = serve_on_a_free_port(*paths, *PLAN, "--detach")
    assert served.returncode == 0, served.stdout + served.stderr
    keeper = _status()["keeper"]["pid"]
    engines = [(e.pid, e.create_time()) for e in _engines(keeper).values()]
    assert len(engines) == 2
    os.kill(keeper, signal.SIGKILL)
    _until(lambda: not any(alive(*e) for e in engines), "its engines gone with it")
    status = _status()
    assert status["running"] is False and status["stale_model_set"]["pid"] == keeper
    assert f"the keeper (pid {keeper})" in run_homelab("status").stdout

    again = run_homelab("serve", *paths, *PLAN, "--port", str(port), "--detach")
    assert again.returncode == 0 and "already served" not in again.stdout, again
    new = _status()["keeper"]["pid"]
    assert new != keeper
    assert chat(f"http://127.0.0.1:{port}", "tiny-qwen3").status_code == 200
    stopped = run_homelab("stop")
    assert stopped.returncode == 0 and f"keeper pid {new}" in stopped.stdout, stopped
    assert not processes_with("--keeper-fd")
