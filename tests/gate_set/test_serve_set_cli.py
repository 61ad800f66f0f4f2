"""``homelab serve A B C`` for real: the set placed on a card that holds two of the three
(``--vram``), one URL, each request answered by the model it named, ``status`` showing
every model, ``stop`` leaving no engine behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.factory.server_log import free_port
from tests.gate_set.conftest import TIMEOUT_S, chat, metric

pytestmark = pytest.mark.engine


def _homelab(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "homelab", *args], capture_output=True, text=True, timeout=timeout
    )


def _engines_of(pid: int) -> list[psutil.Process]:
    try:
        return [
            p for p in psutil.Process(pid).children(recursive=True) if "llama-server" in p.name()
        ]
    except psutil.NoSuchProcess:
        return []


def test_serve_three_models_behind_one_url_two_resident(three_models: dict[str, Path]) -> None:
    paths = [str(three_models[k]) for k in ("smol", "llama", "qwen3")]
    port = free_port()
    argv = [sys.executable, "-m", "homelab", "serve", *paths, "--vram", "2.8GiB"]
    argv += ["--workload", "chat", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            out.append(line)
            if line.startswith("serving 3 models"):
                break
        text = "".join(out)
        assert "serving 3 models" in text, text
        url = f"http://127.0.0.1:{port}"
        listed = httpx.get(f"{url}/v1/models", timeout=30, trust_env=False).json()["data"]
        ids = [m["id"] for m in listed]
        assert ids[1:] == ["tiny-llama", "tiny-qwen3"]
        assert [m["loaded"] for m in listed] == [True, True, False]  # the placement's residents
        assert len(_engines_of(proc.pid)) == 2
        for ident in [ids[2], ids[0], ids[1], ids[2]]:
            r = chat(url, ident)
            assert r.status_code == 200, r.text
            assert r.json()["model"] == ident
            assert len(_engines_of(proc.pid)) <= 2
        assert metric(url, "homelab_gate_model_swaps_total") >= 2
        status = _homelab("status")
        assert f"{url}/v1" in status.stdout and "tiny-qwen3: loaded" in status.stdout, status
        stopped = _homelab("stop")
        assert "stopped: the set of models" in stopped.stdout, stopped
        assert proc.wait(60) is not None
        assert not _engines_of(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    leftover = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(
            os.path.basename(a) in ("tiny-llama.gguf", "tiny-qwen3.gguf")
            for a in p.info["cmdline"] or []
        )
        and str(three_models["llama"].parent) in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftover
