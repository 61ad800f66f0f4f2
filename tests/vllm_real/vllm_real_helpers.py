"""Helpers for the real-vLLM tests: ports, homelab commands, HTTP, processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

VLLM_VERSION = "0.32.0"
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CACHE = Path(os.environ.get("HOMELAB_VLLM_CACHE", Path.home() / ".cache" / "homelab"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def homelab_env(vllm_python: str, base: Path) -> dict[str, str]:
    """The environment every homelab command of one test module runs in."""
    env = dict(os.environ)
    for kind in ("state", "config", "cache"):
        env[f"HOMELAB_{kind.upper()}_DIR"] = str(base / kind)
    env.update(
        PYTHONPATH=str(REPO),
        HOMELAB_VLLM_PYTHON=vllm_python,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    return env


def homelab(
    env: Mapping[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "homelab", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


def _auth(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def get(url: str, timeout: float = 30, key: str | None = None) -> tuple[int, str]:
    """``key``: the engine's own (homelab gives the engine behind its gate one)."""
    request = urllib.request.Request(url, headers=_auth(key))
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, answer.read().decode()


def post(url: str, body: dict, timeout: float = 300, key: str | None = None) -> dict:
    headers = {"Content-Type": "application/json", **_auth(key)}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def engine_key(env: dict[str, str]) -> str | None:
    """The key homelab gave the engine it serves behind its gate (its 0600 record)."""
    record = Path(env["HOMELAB_STATE_DIR"]) / "engine.json"
    return json.loads(record.read_text()).get("api_key")


def vllm_pids(model_dir: Path) -> list[int]:
    """Processes serving ``model_dir`` (the API server; its engine core is its child)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(str(model_dir) == part for part in cmd) and any("vllm" in part for part in cmd):
            found.append(proc.info["pid"])
    return found


def kill_tree(pids: list[int]) -> None:
    import psutil

    for pid in pids:
        try:
            parent = psutil.Process(pid)
            for proc in [*parent.children(recursive=True), parent]:
                proc.kill()
        except psutil.NoSuchProcess:
            pass
