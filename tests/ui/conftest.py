"""Fixtures of the TUI tests: the app built by the same factory the CLI uses, a models
folder holding the real SmolLM2, an empty Hugging Face cache, and no engine left behind.

Pilot tests are plain functions that ``asyncio.run`` a coroutine driving
``App.run_test`` (no asyncio plugin needed); ``tests.ui.helpers.wait_until`` polls a
condition between pilot pauses instead of sleeping a fixed time.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.engine.supervision.process import alive


@pytest.fixture(autouse=True)
def _empty_hf_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """The menu lists the HF cache: give each test an empty one, not this machine's."""
    cache = tmp_path_factory.mktemp("hf-home")
    monkeypatch.setenv("HF_HOME", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache / "hub"))


@pytest.fixture
def models_dir(tmp_path: Path, smollm2_gguf: Path) -> Path:
    """A models folder with the real SmolLM2 in it (a link, not a copy)."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / smollm2_gguf.name).symlink_to(smollm2_gguf)
    return folder


class EnginePids:
    """Engine pids a test saw; SIGKILLed at teardown if still alive."""

    def __init__(self) -> None:
        self.pids: set[int] = set()

    def add(self, pid: int | None) -> None:
        if pid:
            self.pids.add(pid)

    def kill_all(self) -> None:
        for pid in self.pids:
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture
def engine_pids(llama_server_bin: Path) -> Iterator[EnginePids]:
    seen = EnginePids()
    yield seen
    seen.kill_all()
