"""Helpers of the TUI tests (import as ``from tests.ui.helpers import ...``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

GPU_FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"
NO_GPU = GPU_FIXTURES / "no_gpu.json"


async def wait_until(pilot, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Pause the pilot until ``predicate()`` holds; fail with the timeout otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {predicate}")
        await pilot.pause(0.05)


def run(coro) -> None:
    asyncio.run(coro)
