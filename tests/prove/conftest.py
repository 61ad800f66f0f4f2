"""Fixtures of the prove-and-heal tests: the supervisor tests' ``engines`` (nothing left
running), and ``lazy``: the lazy allocation of the test plan's first full batch, measured on
this build with one malloc arena (which the engines homelab spawns inherit)."""

from pathlib import Path

import pytest

from tests.engine.conftest import engines, supervise  # noqa: F401  (fixtures, used by name)
from tests.prove.lazy_memory import ONE_ARENA, Lazy, measure


@pytest.fixture
def lazy(smollm2_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Lazy:
    for name, value in ONE_ARENA.items():
        monkeypatch.setenv(name, value)
    found = measure(smollm2_gguf)
    assert found.after_batch > found.at_ready, f"the batch allocated nothing lazily: {found}"
    return found
