"""A real llama-server for the live-status tests: start, wait until ready, stop, chat.

Readiness here is a plain httpx loop, independent of the code under test.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.factory.server_log import free_port

START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 180.0  # an upper bound for a loaded 2-core machine, not an expectation
SYSTEM = (
    "You are a helpful assistant that answers briefly and kindly about cooking, gardening, "
    "bicycles and the weather in northern Europe. Keep every answer to one sentence."
)


def start_server(
    binary: Path, model: Path, port: int, extra: list[str], log: Path
) -> subprocess.Popen[bytes]:
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), *extra]
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Poll /health (a plain httpx loop, independent of the code under test) until 200."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"llama-server exited with {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            if httpx.get(f"{url}/health", timeout=5, trust_env=False).status_code == 200:
                _assert_ours(url, proc, log)
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    pytest.fail(
        f"llama-server not ready in {START_TIMEOUT_S} s:\n{log.read_text(errors='replace')[-3000:]}"
    )


def _assert_ours(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """The 200 came from this llama-server, not from another program that took the port
    between ``free_port()`` and the engine's bind (seen once with test runs side by side:
    a test then SIGSTOPped its own engine, which had exited, and read the other's health)."""
    port = urlsplit(url).port
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with contextlib.suppress(psutil.Error):
            listening = psutil.Process(proc.pid).net_connections(kind="tcp")
            if any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in listening):
                return
        time.sleep(0.1)
    pytest.fail(
        f"{url} answered, but not from this llama-server (pid {proc.pid}): another program "
        f"took port {port}:\n{log.read_text(errors='replace')[-2000:]}"
    )


def serve(binary: Path, model: Path, folder: Path, extra: list[str]) -> Iterator[str]:
    port = free_port()
    log = folder / "llama-server.log"
    proc = start_server(binary, model, port, extra, log)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc, log)
        yield url
    finally:
        stop_server(proc)


SERVER_ARGS = ["-c", "4096", "-np", "2", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-ngl", "0"]


def chat(url: str, question: str, max_tokens: int = 4) -> dict:
    body = {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    response = httpx.post(
        f"{url}/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT_S, trust_env=False
    )
    response.raise_for_status()
    return response.json()
