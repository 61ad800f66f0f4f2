"""The real llama-server ``-hf`` and ``homelab pull`` share one HF cache, through the Hub stand-in.

llama-server asks the stand-in for ``/api/models/{repo}/refs`` and ``.../tree/{commit}``,
finds the file ``homelab pull`` put in ``snapshots/``, and loads it without downloading;
and the other way round, ``homelab pull`` finds what llama-server downloaded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from homelab.hub.download import pull
from tests.hubstub import HubStub

pytestmark = pytest.mark.engine

REPO = "org/Tiny-GGUF"
START_TIMEOUT_S = 180.0


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub(
        {
            REPO: {
                "Tiny-Q4_K_M.gguf": tiny_gguf("q4.gguf", seed=1),
                "Tiny-Q8_0.gguf": tiny_gguf("q8.gguf", seed=2),
            }
        }
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_once(binary: Path, ref: str, hf_home: Path, endpoint: str) -> str:
    """Start ``llama-server -hf ref``, wait until it is healthy, stop it; returns its log."""
    port = _free_port()
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint + "/"}
    for name in ("LLAMA_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN"):
        env.pop(name, None)
    argv = [
        str(binary),
        "-hf",
        ref,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "256",
        "--no-mmproj",
    ]
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    healthy = False
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    healthy = True
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
    finally:
        process.terminate()
        try:
            log = process.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            log = process.communicate(timeout=30)[0]
    assert healthy, f"llama-server did not become healthy:\n{log[-3000:]}"
    return log


def test_llama_server_loads_what_homelab_pulled_without_downloading(
    stub: HubStub, hf_home: Path, llama_server_bin: Path
) -> None:
    model = pull(f"{REPO}:Q4_K_M")
    before = len(stub.requests)
    _serve_once(llama_server_bin, f"{REPO}:Q4_K_M", hf_home, stub.endpoint)
    asked = stub.requests[before:]
    assert asked, "llama-server did not ask the stand-in at all (is HF_ENDPOINT honoured?)"
    assert [r for r in asked if r.host == "cdn" or r.filename] == [], asked
    assert model.paths[0].is_file()


def test_homelab_pull_finds_what_llama_server_downloaded(
    stub: HubStub, hf_home: Path, llama_server_bin: Path
) -> None:
    _serve_once(llama_server_bin, f"{REPO}:Q8_0", hf_home, stub.endpoint)
    fetched_by_llama = stub.bytes_sent("Tiny-Q8_0.gguf")
    assert fetched_by_llama == stub.file(REPO, "Tiny-Q8_0.gguf").size  # llama-server downloaded it
    model = pull(f"{REPO}:Q8_0", mmproj=False)
    assert model.fetched == 0 and stub.bytes_sent("Tiny-Q8_0.gguf") == fetched_by_llama
    assert model.paths[0].resolve().name == stub.file(REPO, "Tiny-Q8_0.gguf").sha256
