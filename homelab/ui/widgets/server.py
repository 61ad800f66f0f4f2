"""The server panel: the supervisor's state, the URL, uptime, restarts, and the log tail."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

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
    ServerPanel { border: round $primary; padding: 0 1; height: 1fr; }
    ServerPanel #server-state { height: auto; }
    ServerPanel Log { height: 1fr; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="server-state")
        yield Log(id="log", max_lines=LOG_LINES, auto_scroll=True)

    def on_mount(self) -> None:
        self.border_title = "server"
        self._shown: list[str] = []
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

    def show_log(self, lines: list[str]) -> None:
        """Append what is new in the engine's tail (the tail is a sliding window)."""
        if lines == self._shown:
            return
        log = self.query_one("#log", Log)
        new = _new_lines(self._shown, lines)
        if new is None:
            log.clear()
            new = lines
        log.write_lines(new)
        self._shown = list(lines)

    def clear_log(self) -> None:
        self._shown = []
        self.query_one("#log", Log).clear()


def _new_lines(old: list[str], new: list[str]) -> list[str] | None:
    """The lines of ``new`` after the overlap with the end of ``old``; None: no overlap."""
    if not old:
        return new
    for start in range(len(old)):
        overlap = old[start:]
        if new[: len(overlap)] == overlap:
            return new[len(overlap) :]
    return None


def failure_text(failure: Any) -> str | None:
    """One line on why the engine stopped or crashed (the engine's own words when known)."""
    if failure is None:
        return None
    error = failure.to_error()
    return f"{error.title}: {error.message}"
