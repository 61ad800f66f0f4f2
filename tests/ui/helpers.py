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


async def pick_smollm2(pilot) -> None:
    """Every verdict in, then ``/ smollm2 enter``: SmolLM2 picked, its plan shown, workers done
    (the screen the snapshot tests and tools/screenshot.py capture)."""
    from homelab.ui.widgets.models import ModelsMenu

    app = pilot.app
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: app.state.card.report is not None and len(menu.entries) > 0)
    await wait_until(pilot, lambda: len(menu.judgements) == len(menu.entries))
    await pilot.press("slash", *"smollm2", "enter")
    await wait_until(pilot, lambda: app.state.picked.plan is not None)
    await app.workers.wait_for_complete()
    await wait_until(pilot, lambda: len(menu.judgements) == len(menu.entries))
    await pilot.pause()


def run(coro) -> None:
    asyncio.run(coro)


def screen_text(app) -> str:
    """What the screen shows now, as plain text (one line a row)."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()


def on_screen(app, widget) -> bool:
    """Whether ``widget`` is drawn, whole, inside the screen (not hidden, not scrolled off)."""
    region = widget.region
    return bool(widget.display and region.area) and app.screen.region.contains_region(region)


STUB_REPO = "org/Stub-GGUF"
"""The repo the Hub stand-in serves to the download and offline tests."""


def stub_preset() -> None:
    """A user preset ``stubby`` of :data:`STUB_REPO` (its own quant Q4_K_M, for chat)."""
    from homelab.paths import config_dir

    folder = config_dir() / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "stubby.toml").write_text(
        f'name = "Stubby"\nrepo = "{STUB_REPO}"\nquant = "Q4_K_M"\n'
        'engine = "llama.cpp"\nworkload = "chat"\nnotes = "A stand-in."\nlicense = "mit"\n'
    )
