"""The server panel's log: a bounded buffer of pushed lines that the search keeps filtering.

The panel alone, in a bare app, fed lines the way the app feeds it (``append_log`` with
what a ``LogFeed`` took); the engine's side is in tests/ui/test_engine_flows.py and
tests/ui/test_engine_crash.py.
"""

from __future__ import annotations

from textual.app import App, ComposeResult

from homelab.ui.widgets.server import LOG_LINES, ServerPanel
from tests.ui.helpers import run


class _PanelApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ServerPanel(id="server")


def test_the_log_keeps_the_newest_lines_and_the_search_filters_what_arrives() -> None:
    async def drive() -> None:
        app = _PanelApp()
        async with app.run_test(size=(80, 30)) as pilot:
            panel = app.query_one(ServerPanel)
            panel.append_log([f"line {i} {'slot' if i % 10 == 0 else 'other'}" for i in range(600)])
            await pilot.pause()
            shown = panel.visible_lines
            assert len(shown) == LOG_LINES  # bounded: the oldest 100 dropped
            assert shown[0] == "line 100 slot" and shown[-1] == "line 599 other"
            assert len(app.query_one("#log").lines) == LOG_LINES

            panel.focus_search()
            await pilot.press(*"slot")
            assert panel.visible_lines == [f"line {i} slot" for i in range(100, 600, 10)]
            panel.append_log(["line 600 slot", "line 601 other"])  # pushed while searching
            await pilot.pause()
            assert panel.visible_lines[-1] == "line 600 slot"
            log_lines = list(app.query_one("#log").lines)
            assert log_lines[-1] == "line 600 slot" and "line 601 other" not in log_lines

            await pilot.press("escape")  # the search cleared: every kept line again
            assert panel.visible_lines[-2:] == ["line 600 slot", "line 601 other"]
            assert len(panel.visible_lines) == LOG_LINES

    run(drive())
