"""`d` then enter (the chooser's preselected quant: here the preset's own) downloads the
picked preset from the local Hub stand-in; escape cancels; `d` resumes.

The stand-in is real HTTP on 127.0.0.1; its throttle (bytes per second) keeps a
download under way long enough for a key to land mid-transfer, and it records each
request's ``Range`` header, so the resume is seen asking for the rest of the file only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from homelab.ui.app import make_app
from homelab.ui.quant_screen import READING, QuantScreen
from homelab.ui.widgets.download import cancelled_text
from homelab.ui.widgets.models import ModelsMenu
from tests.hub.conftest import gguf_dir, hub_stub, tiny_gguf  # noqa: F401  (fixtures)
from tests.hubstub import HubStub
from tests.ui.helpers import NO_GPU, STUB_REPO, run, stub_preset, wait_until

REPO = STUB_REPO
NAME = "Stub-Q4_K_M.gguf"
SLOW_BPS = 256 * 1024
"""Slow enough that the file (3.5 MiB) takes ~14 s: a cancel lands long before the end."""


def _blobs(stub: HubStub) -> tuple[Path, Path]:
    """The blob a finished download becomes, and the partial file it grows in."""
    sha = stub.file(REPO, NAME).sha256
    folder = Path(os.environ["HF_HUB_CACHE"]) / "models--org--Stub-GGUF" / "blobs"
    return folder / sha, folder / f"{sha}.incomplete"


def _stub(hub_stub, tiny_gguf, **kwargs) -> HubStub:  # noqa: F811
    stub_preset()
    return hub_stub({REPO: {NAME: tiny_gguf("stub.gguf", seed=3, n_layer=48)}}, **kwargs)


def _slow(hub_stub, tiny_gguf):  # noqa: F811
    """A throttled stand-in: it, the served file, its blob and partial file in the cache."""
    stub = _stub(hub_stub, tiny_gguf, throttle_bps=SLOW_BPS)
    return (stub, stub.file(REPO, NAME), *_blobs(stub))


async def _pick_stubby(app, pilot) -> None:
    menu = app.query_one("#menu", ModelsMenu)
    await wait_until(pilot, lambda: any(e.key == "preset:stubby" for e in menu.entries))
    app.query_one("#models").focus()
    await pilot.press("slash", *"stubby", "enter")
    await wait_until(
        pilot, lambda: app.state.picked.entry is not None and app.state.picked.entry.preset
    )
    app.query_one("#models").focus()


async def _d_enter(app, pilot) -> None:
    """``d``, the chooser read, enter: its preselected quant (the preset's own: on this
    card no quant is best) downloads."""
    await pilot.press("d")
    await wait_until(pilot, lambda: isinstance(app.screen, QuantScreen))
    screen = app.screen
    await wait_until(pilot, lambda: READING not in str(screen.query_one("#quants-status").render()))
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(app.screen_stack) == 1)


async def _start_download(app, pilot) -> None:
    """``d`` and enter on the picked preset; back once some bytes of it are on disk."""
    await _d_enter(app, pilot)
    bar = app.query_one("#download")
    await wait_until(pilot, lambda: bar.progress is not None and bar.progress.done > 0)


def _bar(app) -> str:
    return str(app.query_one("#download").render())


async def _until_done(app, pilot) -> None:
    try:
        await wait_until(pilot, lambda: "downloaded" in _bar(app), timeout=60)
    except AssertionError:
        raise AssertionError(_bar(app)) from None


def _downloads(stub: HubStub) -> list:
    """The CDN GETs of whole-file downloads: no Range, or an open-ended one (a resume);
    the header reads of the verdicts ask for closed ranges (``bytes=0-65535``)."""
    gets = [r for r in stub.requests_for(NAME) if r.host == "cdn"]
    return [r for r in gets if r.range is None or r.range.endswith("-")]


def _app():
    return make_app(gpu_snapshot=NO_GPU, refresh_s=0.5, blink=False, adopt=False)


def test_download_then_the_model_plans_from_the_cache(hub_stub, tiny_gguf) -> None:  # noqa: F811
    stub = _stub(hub_stub, tiny_gguf)
    size = stub.file(REPO, NAME).size

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            await _d_enter(app, pilot)
            await _until_done(app, pilot)
            assert "checksum verified" in _bar(app)
            blob, partial = _blobs(stub)
            assert not partial.exists() and blob.stat().st_size == size
            await wait_until(
                pilot,
                lambda: (
                    app.state.picked.model_path is not None and app.state.picked.plan is not None
                ),
                timeout=30,
            )
            assert (
                app.state.picked.model_path.stat().st_size == size
            )  # planned from the cached file
            await pilot.press("q")

    run(drive())


@pytest.mark.parametrize("focus", ["#models", "#ctx"], ids=["in-the-table", "in-a-plan-field"])
def test_escape_cancels_and_d_resumes_from_the_partial_file(hub_stub, tiny_gguf, focus) -> None:  # noqa: F811
    stub, file, blob, partial = _slow(hub_stub, tiny_gguf)
    kept: list[int] = []

    async def drive() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            await _start_download(app, pilot)
            app.query_one(focus).focus()  # escape cancels anywhere (a field is left first)
            await pilot.pause()
            assert app.focused is app.query_one(focus)
            if focus == "#ctx":  # in a field the first escape only leaves the field
                await pilot.press("escape")
                assert app.focused is app.query_one("#models") and "cancelled" not in _bar(app)
                assert not app.download_cancel.is_set()
            await pilot.press("escape")
            await wait_until(pilot, lambda: "cancelled" in _bar(app), timeout=30)
            kept.append(partial.stat().st_size)
            assert 0 < kept[0] < file.size
            assert not blob.exists()
            assert _bar(app) == cancelled_text(kept[0], file.size)  # the bytes on disk, exactly
            assert app.download_cancel is None  # the worker ended; d may start another

            stub.throttle(None)  # the rest as fast as it goes
            app.query_one("#models").focus()  # d in a plan field would be typed into it
            await _d_enter(app, pilot)
            await _until_done(app, pilot)
            assert "checksum verified" in _bar(app)
            await pilot.press("q")

    run(drive())
    gets = _downloads(stub)
    assert [r.range for r in gets] == [None, f"bytes={kept[0]}-"]
    assert gets[-1].status == 206 and gets[-1].bytes_sent == file.size - kept[0]
    assert not partial.exists()
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == file.sha256


def test_quit_during_a_download_keeps_the_partial_file_for_a_resume(hub_stub, tiny_gguf) -> None:  # noqa: F811
    stub, file, blob, partial = _slow(hub_stub, tiny_gguf)

    async def quit_mid_way() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            await _start_download(app, pilot)
            await pilot.press("q")
        assert app.return_code == 0  # run_test re-raises anything the app raised

    run(quit_mid_way())  # returns: the worker stopped (asyncio.run waits for its thread)
    kept = partial.stat().st_size
    assert 0 < kept < file.size and not blob.exists()

    stub.throttle(None)

    async def resume() -> None:
        app = _app()
        async with app.run_test(size=(140, 45)) as pilot:
            await _pick_stubby(app, pilot)
            await _d_enter(app, pilot)
            await _until_done(app, pilot)
            await pilot.press("q")

    run(resume())
    assert [r.range for r in _downloads(stub)] == [None, f"bytes={kept}-"]
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == file.sha256
