"""The plan panel's cache menu, focused and closed: letters are not the app's hotkeys there
(as in a field), while enter, space and the arrows open and move it and escape hands the
keys back to the models menu."""

from __future__ import annotations

import pytest
from textual.widgets import Select

from tests.ui.helpers import GPU_FIXTURES, run, wait_until
from tests.ui.test_keys import HOTKEYS, _app, _record_notes


def test_no_hotkey_fires_from_the_closed_cache_menu() -> None:
    async def drive() -> None:
        app = _app(gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json")
        async with app.run_test(size=(140, 45)) as pilot:
            await app.workers.wait_for_complete()
            notes = _record_notes(app)
            cache = app.query_one("#cache", Select)
            cache.focus()
            await pilot.pause()
            for key in HOTKEYS:
                await pilot.press(key)
                # none acted: no dialog, no note, no build, still running, the menu closed
                assert app.is_running and len(app.screen_stack) == 1, key
                assert notes == [] and app.build_cancel is None, key
                assert app.focused is cache and not cache.expanded, key
                assert cache.value == "auto", key
            await pilot.press("escape")  # back to the models menu, as from a field
            assert app.focused is app.query_one("#models")
            await pilot.press("x")  # the keys act again: x says why it cannot
            assert notes.pop() == ("Nothing to stop", "No engine is running."), notes

    run(drive())


@pytest.mark.parametrize("opener", ["enter", "space", "down", "up"])
def test_the_closed_cache_menu_still_opens_and_moves(opener: str) -> None:
    async def drive() -> None:
        app = _app(gpu_snapshot=GPU_FIXTURES / "rtx3090_wayland.json")
        async with app.run_test(size=(140, 45)) as pilot:
            await app.workers.wait_for_complete()
            notes = _record_notes(app)
            cache = app.query_one("#cache", Select)
            cache.focus()
            await pilot.pause()
            await pilot.press("s", "b")  # swallowed: nothing starts, nothing asks
            assert notes == [] and len(app.screen_stack) == 1 and app.focused is cache
            await pilot.press(opener)
            await wait_until(pilot, lambda: cache.expanded)
            await pilot.press("down", "enter")  # the overlay starts on the current value
            await wait_until(pilot, lambda: not cache.expanded)
            assert cache.value == "q8_0"
            assert app.focused is cache
            await pilot.press("escape")
            assert app.focused is app.query_one("#models")

    run(drive())
