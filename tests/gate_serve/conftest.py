"""Fixtures of the gate-in-serve tests: the engine tests' ``engines`` (no llama-server left
behind) and ``gates`` (no detached gate process of this test left behind either)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psutil
import pytest

from tests.engine.conftest import engines  # noqa: F401  (the fixture, shared)
from tests.gate_serve.helpers import gate_processes


@pytest.fixture
def gates() -> Iterator[None]:
    yield
    left = gate_processes()
    for process in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    assert not left, f"gate processes left running (killed now): {[p.pid for p in left]}"
