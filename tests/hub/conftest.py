"""Fixtures for the Hub tests: an isolated Hugging Face environment and the local Hub stand-in.

Every test here gets ``HF_HOME`` in its own temporary folder and none of the user's
``HF_*`` settings (no token, not offline, no endpoint), so nothing reads or writes the
real ``~/.cache/huggingface`` and nothing reaches the internet. ``hub_stub(...)`` starts a
:class:`tests.hubstub.HubStub` and points ``HF_ENDPOINT`` at it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.factory import write_gguf
from tests.hubstub import HubStub

_HF_VARS = (
    "HF_HOME",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "XDG_CACHE_HOME",
)


@pytest.fixture(autouse=True)
def hf_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``HF_HOME`` (the HF cache is ``<it>/hub``); every other ``HF_*`` variable unset."""
    for name in _HF_VARS:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path_factory.mktemp("hf-home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return home


@pytest.fixture
def hf_cache(hf_home: Path) -> Path:
    """The HF hub cache folder the code under test must use."""
    return hf_home / "hub"


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ggufs")


@pytest.fixture(scope="session")
def tiny_gguf(gguf_dir: Path) -> Callable[..., Path]:
    """``tiny_gguf(name, seed=0, n_layer=1)``: a small real llama GGUF (about 0.2 MB per layer).

    Files are cached per (name, seed, n_layer) for the session; different seeds give
    different bytes, so sha256s differ between quants of the same stand-in repo.
    """
    made: dict[tuple[str, int, int], Path] = {}

    def make(name: str, seed: int = 0, n_layer: int = 1) -> Path:
        key = (name, seed, n_layer)
        if key not in made:
            path = gguf_dir / f"{seed}-{n_layer}-{name}"
            made[key] = write_gguf(
                "llama",
                path,
                n_layer=n_layer,
                n_embd=64,
                n_ff=128,
                n_head=2,
                n_head_kv=1,
                head_dim=32,
                seed=seed,
            )
        return made[key]

    return make


@pytest.fixture
def hub_stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., HubStub]]:
    """``hub_stub(repos, gated=..., private=...)``: a started stand-in, ``HF_ENDPOINT`` pointing at it."""
    started: list[HubStub] = []

    def start(repos: dict[str, dict[str, bytes | Path]], **kwargs: object) -> HubStub:
        stub = HubStub(repos, **kwargs).start()  # type: ignore[arg-type]
        started.append(stub)
        monkeypatch.setenv("HF_ENDPOINT", stub.endpoint)
        return stub

    yield start
    for stub in started:
        stub.close()
