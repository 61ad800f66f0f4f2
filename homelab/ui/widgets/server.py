"""The server panel: the supervisor's state, the URL, uptime, restarts, and the log tail."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Log, Static

from homelab.ui.widgets.download import DownloadBar

STATE_STYLE = {
    "stopped": "dim",
    "starting": "yellow",
    "ready": "bold green",
    "crashed": "bold red",
    "restarting": "yellow",
    "stopping": "yellow",
}
LOG_LINES = 500


class ServerPanel(Vertical):
    DEFAULT_CSS = """
    ServerPanel { border: round $primary; padding: 0 1; height: 1fr; min-height: 10; }
    ServerPanel #server-state { height: auto; }
    ServerPanel #server-actuals { height: auto; }
    ServerPanel #log-search { height: 1; border: none; padding: 0; }
    ServerPanel Log { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="server-state")
        yield Static("", id="server-actuals")
        yield DownloadBar("", id="download")
        yield Input(placeholder="l: search the log", id="log-search")
        yield Log(id="log", max_lines=LOG_LINES, auto_scroll=True)

    def on_mount(self) -> None:
        self.border_title = "server"
        self._shown: list[str] = []
        self._all: list[str] = []
        self._needle = ""
        self.show_state(None, None, None, 0, None)

    def show_state(
        self,
        state: str | None,
        url: str | None,
        uptime: str | None,
        restarts: int,
        detail: str | None,
        model: str | None = None,
    ) -> None:
        text = Text()
        if state is None:
            text.append("no engine running", style="dim")
            text.append("  (s starts the picked model)", style="dim italic")
        else:
            text.append(state, style=STATE_STYLE.get(state, ""))
            if model:
                text.append(f"  {model}")
            text.append("\n")
            text.append(f"URL {url or '—'}", style="bold" if url else "dim")
            text.append(f"  up {uptime or '—'}  restarts {restarts}")
        if detail:
            text.append(f"\n{detail}", style="red")
        self.query_one("#server-state", Static).update(text)

    def show_actuals(self, rows: Any) -> None:
        """Predicted vs actual memory after boot, one line per part (the session's Actuals)."""
        text = Text()
        if rows:
            text.append("predicted → actual", style="bold")
            for row in rows:
                text.append(f"\n{row.name}: {_size(row.predicted)} → {_size(row.actual)}")
        self.query_one("#server-actuals", Static).update(text)

    def show_log(self, lines: list[str]) -> None:
        """Append what is new in the engine's tail (the tail is a sliding window)."""
        if lines == self._all:
            return
        new = _new_lines(self._all, lines)
        self._all = list(lines)
        if new is None or self._needle:
            self._redraw()
            return
        self.query_one("#log", Log).write_lines(new)
        self._shown = list(lines)

    def search(self, query: str) -> None:
        """Show only the lines containing ``query`` (case-insensitive); "" shows all."""
        self._needle = query
        self._redraw()

    def _redraw(self) -> None:
        needle = self._needle.lower()
        lines = [line for line in self._all if needle in line.lower()]
        log = self.query_one("#log", Log)
        log.clear()
        log.write_lines(lines)
        self._shown = lines

    @property
    def visible_lines(self) -> list[str]:
        """The log lines on show (after the search)."""
        return list(self._shown)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            event.stop()
            self.search(event.value)

    def on_key(self, event: Any) -> None:
        search = self.query_one("#log-search", Input)
        if event.key == "escape" and (search.has_focus or self._needle):
            event.stop()
            search.value = ""
            self.search("")
            self.query_one("#log", Log).focus()

    def focus_search(self) -> None:
        self.query_one("#log-search", Input).focus()

    def clear_log(self) -> None:
        self._shown = []
        self._all = []
        self.query_one("#log", Log).clear()
        self.query_one("#server-actuals", Static).update("")


def _new_lines(old: list[str], new: list[str]) -> list[str] | None:
    """The lines of ``new`` after the overlap with the end of ``old``; None: no overlap."""
    if not old:
        return new
    for start in range(len(old)):
        overlap = old[start:]
        if new[: len(overlap)] == overlap:
            return new[len(overlap) :]
    return None


def _size(value: int | None) -> str:
    from homelab.units import format_bytes

    return "—" if value is None else format_bytes(value, precision=1)


def failure_text(failure: Any) -> str | None:
    """One line on why the engine stopped or crashed (the engine's own words when known)."""
    if failure is None:
        return None
    error = failure.to_error()
    return f"{error.title}: {error.message}"
