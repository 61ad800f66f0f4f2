"""The footer line (issue 21: "a key that can't act now says why in the footer line"): what
the app says is drawn in the footer over the keys, in the frame the key is handled in (not a
toast mounted later), without moving any other panel; errors and what the line cannot hold
whole are toasts as well; the keys are click targets; a worker's thread may say things."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory
from homelab.ui.app import make_app
from homelab.ui.chat_screen import ChatScreen
from homelab.ui.widgets.keys import KeysFooter, Said, columns_that_fit, wrapped
from homelab.units import GiB
from tests.ui.helpers import GPU_FIXTURES, run, screen_text, wait_until

CARD = GPU_FIXTURES / "rtx3090_wayland.json"


@pytest.fixture(autouse=True)
def _still_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=32 * GiB, available=24 * GiB))


def _app(models_dir: Path):
    return make_app(
        gpu_snapshot=CARD,
        models_dirs=[models_dir],
        refresh_s=0,
        blink=False,
        adopt=False,
        check_agents=False,
    )


def _footer_lines(app) -> list[str]:
    """The screen's rows the footer covers, as text."""
    footer = app.screen.query_one(KeysFooter)
    rows = screen_text(app).splitlines()
    return rows[footer.region.y : footer.region.bottom]


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_a_key_that_cannot_act_says_why_in_the_footer_line(models_dir: Path, size) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            footer = app.query_one(KeysFooter)
            regions = {w.id: w.region for w in app.query("#left, #right, #menu, #plan")}
            before = footer.region
            await pilot.press("x")
            # said before the next frame is drawn: the key's handler wrote it
            assert footer.said == Said("No engine is running.", "Nothing to stop")
            await pilot.pause()
            assert "Nothing to stop: No engine is running." in _footer_lines(app)[0]
            assert not app._notifications  # no toast for what the line shows whole
            # the line was there already: nothing moved
            assert footer.region == before
            assert {w.id: w.region for w in app.query("#left, #right, #menu, #plan")} == regions
            assert list(app.said)[-1].message == "No engine is running."

    run(drive())


def test_the_line_clears_after_its_time_and_a_newer_message_replaces_it(models_dir) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            app.notify("first", title="One", timeout=30)
            app.notify("second", title="Two", timeout=0.3)
            await pilot.pause()
            assert "Two: second" in _footer_lines(app)[0]
            assert "One" not in _footer_lines(app)[0]
            await wait_until(pilot, lambda: app.query_one(KeysFooter).said is None, 5)
            await pilot.pause()
            assert _footer_lines(app)[0].strip() == ""
            # the earlier message's own (longer) timer does not clear a later one
            app.notify("third", title="Three", timeout=30)
            await pilot.pause(0.5)
            assert "Three: third" in _footer_lines(app)[0]

    run(drive())


def test_errors_and_what_the_line_cannot_hold_are_toasts_as_well(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.notify("the engine exited", title="Crash", severity="error")
            await pilot.pause()
            assert [n.message for n in app._notifications] == ["the engine exited"]
            assert "Crash: the engine exited" in _footer_lines(app)[0]

            long = "word " * 40
            app.notify(long.strip(), title="Long")
            await pilot.pause()
            line = _footer_lines(app)[0].rstrip()
            assert line.endswith("…") and len(line) <= 80
            assert long.strip() in [n.message for n in app._notifications]

            app.notify("first line\nsecond line", title="Two lines")
            await pilot.pause()
            assert "Two lines: first line" in _footer_lines(app)[0]
            assert "first line\nsecond line" in [n.message for n in app._notifications]

    run(drive())


def test_a_key_in_the_footer_is_a_click_target(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(200, 60)) as pilot:
            await pilot.pause()
            footer = app.query_one(KeysFooter)
            row = _footer_lines(app)[1]
            column = row.index(" x stop")
            await pilot.click(KeysFooter, offset=(column + 2, 1))
            await pilot.pause()
            assert footer.said is not None and footer.said.title == "Nothing to stop"

    run(drive())


def test_a_worker_thread_may_say_something(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            thread = threading.Thread(target=lambda: app.notify("from a thread", title="T"))
            thread.start()
            await wait_until(pilot, lambda: app.query_one(KeysFooter).said is not None, 5)
            await pilot.pause()
            assert "T: from a thread" in _footer_lines(app)[0]
            thread.join()

    run(drive())


def test_the_chat_pane_has_the_line_too(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            app.push_screen(ChatScreen("http://127.0.0.1:9", "m"))
            await pilot.pause()
            await pilot.press("enter")  # nothing typed
            await pilot.pause()
            assert "Nothing to send: Type a question first." in _footer_lines(app)[0]
            assert app.screen.query_one(KeysFooter).shown  # its own keys under it

    run(drive())


def test_wrapped_breaks_at_spaces_and_marks_what_it_left_out() -> None:
    assert wrapped("a b c", 10, 1) == (["a b c"], False)
    assert wrapped("aaaa bbbb cccc", 9, 2) == (["aaaa bbbb", "cccc"], False)
    assert wrapped("aaaa bbbb cccc dddd", 9, 1) == (["aaaa bbb…"], True)
    lines, cut = wrapped("x" * 30, 10, 1)  # one word wider than the line
    assert cut and lines == ["x" * 9 + "…"]
    assert wrapped("", 10, 1) == ([], False)


def test_columns_that_fit() -> None:
    assert columns_that_fit([10, 10, 10], 30) == 3
    assert columns_that_fit([10, 10, 10], 29) == 2
    assert columns_that_fit([40], 10) == 1


def test_s_on_a_preset_not_downloaded_says_d_downloads_it(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("slash", *"qwen3-8b", "enter")  # a preset: no file here
            await wait_until(pilot, lambda: app.state.picked.plan is not None, 60)
            assert app.state.picked.model_path is None
            await pilot.press("s")
            await pilot.pause()
            line = _footer_lines(app)[0]
            assert "Not downloaded: qwen3-8b" in line and "d downloads it" in line, line
            assert "homelab pull" not in line

    run(drive())
