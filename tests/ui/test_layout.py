"""The main screen at 80×24, 120×40, 160×45 and 200×60 (issue 21, responsive layout): one
column of pages under 120 columns with the engine's state and URL always in view, two
columns above with no fixed width, verdicts shortened but never cut inside a number, every
key of the footer on screen, and the focused widget never out of sight.

The card is the recorded RTX 3090 under KDE Wayland, the models the presets and the real
SmolLM2 (picked, as the snapshots pick it), offline; no engine runs: where a test needs the
state line of a serving engine it is given one, as the experts test does.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from textual.widgets import DataTable, Input, Static

from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory
from homelab.ui.app import make_app
from homelab.ui.catalog import ELLIPSIS, FROM_PRESET, Judgement, fitted
from homelab.ui.widgets.keys import KeysFooter
from homelab.ui.widgets.models import ModelsMenu
from homelab.ui.widgets.server import ServerPanel
from homelab.units import GiB
from tests.ui.helpers import GPU_FIXTURES, on_screen, pick_smollm2, run, screen_text

CARD = GPU_FIXTURES / "rtx3090_wayland.json"
URL = "http://127.0.0.1:8080"


@pytest.fixture(autouse=True)
def _still_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=32 * GiB, available=24 * GiB))


def _app(models_dir: Path):
    return make_app(
        gpu_snapshot=CARD, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
    )


def _serving(app) -> None:
    app.query_one("#server", ServerPanel).show_state(
        "ready", URL, "1 s", 0, None, "SmolLM2-135M-Instruct.Q4_1"
    )


def test_at_80x24_the_state_and_url_are_on_every_page(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await pick_smollm2(pilot)
            _serving(app)
            for page in ("models", "plan", "card", "server"):
                app.query_one("#pages").show_page(page)
                await pilot.pause()
                screen = screen_text(app)
                assert re.search(rf"ready\s+URL {re.escape(URL)}", screen), (page, screen)
                assert on_screen(app, app.query_one("#status-line", Static)), page
                # and the page's own panel fills the one column
                panel = {"models": "#menu", "plan": "#plan", "card": "#card", "server": "#server"}
                assert app.query_one(panel[page]).region.width == 80, page

    run(drive())


def test_at_80x24_the_models_table_shows_quant_size_and_verdict(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await pick_smollm2(pilot)
            menu = app.query_one("#menu", ModelsMenu)
            key = next(e.key for e in menu.entries if e.name.startswith("SmolLM2"))
            table = menu.query_one("#models", DataTable)
            verdict = str(table.get_cell(key, "verdict"))
            screen = screen_text(app)
            assert re.search(r"model\s+quant\s+size\s+verdict", screen), screen
            row = next(line for line in screen.splitlines() if "SmolLM2" in line)
            assert re.search(r"Q4_1\s+93\.81 MiB\s+" + re.escape(verdict), row), row
            assert verdict.startswith("fits: ")

    run(drive())


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 45), (200, 60)])
def test_no_verdict_is_cut_inside_a_number(models_dir: Path, size: tuple[int, int]) -> None:
    """Every row's verdict is on screen whole, as the menu worded it for its room, and that
    wording keeps only whole numbers of the verdict (the issue saw ``fits: 18`` at 120×40)."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=size) as pilot:
            await pick_smollm2(pilot)
            menu = app.query_one("#menu", ModelsMenu)
            table = menu.query_one("#models", DataTable)
            table_region = table.content_region
            assert table.virtual_size.width <= table_region.width  # nothing scrolled sideways
            lines = screen_text(app).splitlines()
            for row_index, entry in enumerate(menu.visible_entries()):
                cell = str(table.get_cell(entry.key, "verdict"))
                _whole_numbers_only(cell, menu.judgements[entry.key])
                table.move_cursor(row=row_index)  # bring the row into view
                await pilot.pause()
                lines = screen_text(app).splitlines()
                shown = [line for line in lines if cell in line]
                assert shown, (entry.name, cell)

    run(drive())


def _whole_numbers_only(shown: str, judged: Judgement) -> None:
    words = {w.strip(",") for w in f"{judged.text} {judged.compact or ''}".split()}
    for word in shown.removesuffix(FROM_PRESET).split():
        word = word.strip(",")
        if any(c.isdigit() for c in word):
            assert word in words, (shown, judged)
    assert not re.search(r"\d" + ELLIPSIS, shown), shown


def test_fitted_never_cuts_a_number_at_any_width() -> None:
    judged = Judgement(
        "fits",
        "fits: 100,096 tokens, 16 slots, experts of 7 layers in RAM (2.1 GiB) †",
        compact="fits: 100k × 16, experts in RAM †",
    )
    for width in range(1, 80):
        shown = fitted(judged, width)
        assert cell_len(shown) <= max(width, 1), (width, shown)
        _whole_numbers_only(shown, judged)
    assert fitted(judged, 20) == "fits: 100k × 16 … †"
    assert fitted(judged, 10) == "fits †"
    assert fitted(Judgement("does_not_fit", "does not fit: short by 2.1 GiB"), 16) == (
        "does not fit"
    )
    capped = Judgement(
        "fits", "fits: 32 slots × 8,192 tokens", compact="fits: 32×8,192 (trained cap)"
    )
    assert fitted(capped, 22) == "fits: 32×8,192 …"  # the parenthesis goes first
    assert fitted(capped, 15) == "fits"


@pytest.mark.parametrize("size", [(160, 45), (200, 60)])
def test_the_left_column_is_not_a_fixed_56(models_dir: Path, size: tuple[int, int]) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=size) as pilot:
            await pick_smollm2(pilot)
            left = app.query_one("#left").region.width
            right = app.query_one("#right").region.width
            assert left + right == size[0] and left == round(size[0] * 2 / 5)
            # the log (and the card's bar) as wide as the column
            log = app.query_one("#log")
            assert log.region.width >= left - 4
            bar = next(
                line
                for line in screen_text(app).splitlines()
                if "█" in line  # the card's bar
            )
            assert bar.count("█") == left - 4

    run(drive())


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
def test_l_shows_the_log_it_focuses(models_dir: Path, size: tuple[int, int]) -> None:
    """With the live panel tall (an engine serving), ``l`` focuses the log's search: it is on
    the screen (its page in one column, scrolled to in two), and the log under it too."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=size) as pilot:
            await pick_smollm2(pilot)
            metrics = app.query_one("#metrics")
            metrics.display = True
            metrics.query_one("#metrics-text", Static).update("\n".join(["live"] * 20))
            _serving(app)
            await pilot.pause()
            await pilot.press("l")
            await pilot.pause()
            search = app.query_one("#log-search", Input)
            assert search.has_focus
            assert on_screen(app, search), search.region
            assert on_screen(app, app.query_one("#log")), app.query_one("#log").region
            await pilot.press("escape")  # the odd case: back out, then `/` to the models
            await pilot.press("slash")
            await pilot.pause()
            assert on_screen(app, app.query_one("#filter", Input))

    run(drive())


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (160, 45), (200, 60)])
def test_every_key_of_the_footer_is_on_screen(models_dir: Path, size: tuple[int, int]) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=size) as pilot:
            await pick_smollm2(pilot)
            footer = app.query_one(KeysFooter)
            drawn = [key for row in footer.key_rows(footer.size.width) for key in row]
            assert len(drawn) >= 8
            # every key of the app is drawn; only ctrl+p (Textual's palette) may be left out,
            # where it alone would take a row (80 columns)
            left_out = [key.key for key in footer.shown if key not in drawn]
            assert left_out in ([], [app.COMMAND_PALETTE_BINDING]), left_out
            assert on_screen(app, footer), footer.region
            screen = screen_text(app)
            for key in drawn:
                assert f"{key.display} {key.description}" in screen, key.description

    run(drive())


def test_the_count_says_how_many_of_the_models_are_shown(models_dir: Path) -> None:
    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(160, 45)) as pilot:
            await pick_smollm2(pilot)
            menu = app.query_one("#menu", ModelsMenu)
            listed = len(menu.entries)
            assert str(menu.border_subtitle).startswith(f"{listed} models")
            await pilot.press("slash", *"smollm2")
            await pilot.pause()
            assert str(menu.border_subtitle).startswith(f"1 of {listed} models")
            await pilot.press(*"zzz-no-such")  # the odd case: nothing matches
            await pilot.pause()
            assert str(menu.border_subtitle).startswith(f"0 of {listed} models")
            await pilot.press("escape")
            await pilot.pause()
            assert str(menu.border_subtitle).startswith(f"{listed} models")

    run(drive())


def test_the_legend_gives_each_part_its_own_colour(models_dir: Path) -> None:
    """The colours as drawn (the theme maps the ANSI ones: its magenta was its red, so the
    desktop and the headroom looked the same)."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(200, 60)) as pilot:
            await pick_smollm2(pilot)
            svg = app.export_screenshot()
        fills = dict(re.findall(r"\.(terminal-[\w-]+) \{ fill: (#[0-9a-f]{6})", svg))
        marks = re.findall(r'<text class="(terminal-[\w-]+)"[^>]*>■', svg)
        colours = [fills[m] for m in marks]
        assert len(colours) == 8  # reserved, desktop, other, weights, KV, compute, headroom, free
        assert len(set(colours)) == len(colours), colours

    run(drive())


def test_a_resize_between_one_and_two_columns(models_dir: Path) -> None:
    """The odd case: the terminal resized across the line, on a page other than the first:
    two columns show every panel, and one column the page that was up."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await pick_smollm2(pilot)
            app.query_one("#pages").show_page("card")
            await pilot.pause()
            assert not on_screen(app, app.query_one("#menu"))
            await pilot.resize_terminal(200, 60)
            await pilot.pause()
            for panel in ("#card", "#server", "#menu", "#plan"):
                assert on_screen(app, app.query_one(panel)), panel
            assert not app.query_one("#pages").display
            await pilot.resize_terminal(80, 24)
            await pilot.pause()
            assert on_screen(app, app.query_one("#card"))
            assert not on_screen(app, app.query_one("#menu"))

    run(drive())


def test_the_keys_1_to_4_bring_up_the_pages_their_tabs_name(models_dir: Path) -> None:
    """At 80×24 the tabs read ``1 models  2 plan  3 card  4 server``; each key brings its
    page up. The plan and card keys focus no field (every hotkey still acts: ``/`` from the
    card brings the models back with the filter); the server's focuses the log; 1 the
    models table. A 2 typed into the filter is text, not a page."""

    async def drive() -> None:
        app = _app(models_dir)
        async with app.run_test(size=(80, 24)) as pilot:
            await pick_smollm2(pilot)
            assert "1 models  2 plan  3 card  4 server" in screen_text(app)
            table = app.query_one("#models", DataTable)
            await pilot.press("2")
            await pilot.pause()
            assert "Model: llama, 30 layers" in screen_text(app)
            assert on_screen(app, app.query_one("#plan")) and not on_screen(app, table)
            assert not isinstance(app.focused, Input), app.focused
            await pilot.press("3")
            await pilot.pause()
            assert "GPU 0: NVIDIA GeForce RTX 3090" in screen_text(app)
            assert not on_screen(app, app.query_one("#plan"))
            await pilot.press("slash")  # a hotkey acts on the card page
            await pilot.pause()
            assert app.query_one("#filter", Input).has_focus and on_screen(app, table)
            await pilot.press("escape", "4")
            await pilot.pause()
            assert app.query_one("#log").has_focus and on_screen(app, app.query_one("#server"))
            await pilot.press("1")
            await pilot.pause()
            assert table.has_focus and on_screen(app, app.query_one("#menu"))
            await pilot.press("slash", "2")  # typed into the filter: no page turns
            await pilot.pause()
            assert app.query_one("#filter", Input).value == "2"
            assert on_screen(app, app.query_one("#menu"))

    run(drive())
