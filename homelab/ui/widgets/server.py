"""The server panel: the supervisor's state, the URL, uptime, restarts, the engine's failure in its
own words, a re-plan's old vs new, and the log (lines the supervisor pushes; bounded, searchable)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Log, Static

from homelab.ui.state import LOOKING
from homelab.ui.widgets.download import DownloadBar
from homelab.ui.widgets.pages import StatusLine, status_text

if TYPE_CHECKING:
    from textual.events import Key

    from homelab.engine.llamacpp.actuals import ActualRow
    from homelab.engine.supervision.failure import EngineFailure
    from homelab.serve.set_view import SetView

STATE_STYLE = {
    "stopped": "dim",
    "starting": "yellow",
    "ready": "bold green",
    "kept": "bold green",
    "crashed": "bold red",
    "restarting": "yellow",
    "stopping": "yellow",
    "gave up": "bold red",
    "failed": "bold red",
}
SET_STYLE = {"loaded": "green", "loading": "yellow", "unloading": "yellow", "unloaded": "dim"}
"""A set's model's line, by its state."""
LOG_LINES = 500
"""Log lines kept (and shown); older ones drop out."""


class ServerPanel(Vertical):
    DEFAULT_CSS = """
    ServerPanel { border: round $primary; padding: 0 1; height: 1fr; min-height: 8; }
    ServerPanel #server-state { height: auto; max-height: 50%; overflow-y: auto; }
    ServerPanel #server-actuals { height: auto; max-height: 25%; overflow-y: auto; }
    ServerPanel #log-search { height: 1; border: none; padding: 0; }
    ServerPanel Log { height: 1fr; min-height: 3; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="server-state")
        yield Static("", id="server-actuals")
        yield DownloadBar("", id="download")
        yield Input(placeholder="l: search the log", id="log-search")
        yield Log(id="log", max_lines=LOG_LINES, auto_scroll=True)

    def on_mount(self) -> None:
        self.border_title = "server"
        self._all: deque[str] = deque(maxlen=LOG_LINES)
        self._state_text: Text | None = None
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
        *,
        failure: EngineFailure | None = None,
        failure_past: bool = False,
        note: str | None = None,
        backend: str | None = None,
        verdict: str | None = None,
        contract: str | None = None,
        looking: bool = False,
    ) -> None:
        """The state line, the URL, ``verdict`` (the running plan's, worded as the menu words
        it: what fits and what stays off the card), and below them: ``detail`` (a problem before any engine),
        ``failure`` (the engine's explained ``EngineFailure``: now, or with ``failure_past``
        the last crash before it came back), ``note`` (a re-plan, old vs new) and, while one
        runs, ``backend`` (what the engine binary computes on). ``looking``: no engine yet,
        and the app still looks for one an earlier homelab left running."""
        text = Text()
        if state is None and looking:  # the adoption worker has not looked yet
            text.append(LOOKING, style="dim italic")
        elif state is None:
            text.append("no engine running", style="dim")
            text.append("  (s starts the picked model)", style="dim italic")
        else:
            text.append(state, style=STATE_STYLE.get(state, ""))
            if model:
                text.append(f"  {model}")
            text.append("\n")
            text.append(f"URL {url or '—'}", style="bold" if url else "dim")
            text.append(f"  up {uptime or '—'}  restarts {restarts}")
            if verdict:
                text.append(f"\nplan {verdict}")
            if url and contract:  # the agent contract check, next to the URL agents get
                style = "green" if contract == "tool calls: ok" else "yellow"
                text.append(f"\nagents: {contract}", style=style)
            if backend:
                text.append(f"\non {backend}", style="dim")
        if note:
            text.append(f"\n{note}", style="cyan")
        if failure is not None:
            text.append("\n")
            text.append_text(failure_text(failure, failure_past))
        if detail:
            text.append(f"\n{detail}", style="red")
        if text == self._state_text:
            return
        self._state_text = text
        for line in self.screen.query(StatusLine):  # the narrow layout's line, on every page
            line.update(status_text(state, url, model, STATE_STYLE.get(state or "", "")))
        self.query_one("#server-state", Static).update(text)
        log = self.query_one("#log", Log)
        if log.is_vertical_scroll_end:  # the panel's height changes: keep the newest in view
            self.call_after_refresh(log.scroll_end, animate=False)

    def show_set(self, view: SetView) -> None:
        """A set of models homelab serves (not this app's engine): its URL and each model's
        state, as its gate says."""
        text = Text()
        text.append("set", style=STATE_STYLE["ready"] if view.answering else "yellow")
        who = "homelab's keeper" if view.kept else "homelab"
        text.append(f"  {len(view.models)} models ({who} pid {view.pid})\n")
        text.append(f"URL {view.url}/v1", style="bold")
        if not view.answering:
            text.append("\nits gate does not answer", style="red")
        for model in view.models:
            style = SET_STYLE.get(model.state or "", "")
            text.append(f"\n  {model.line()}", style=style)
        if view.restarts:
            text.append(f"\nlast restart: {view.restarts[-1].describe()}", style="yellow")
        text.append("\n`homelab stop` stops the set", style="dim italic")
        if text == self._state_text:
            return
        self._state_text = text
        for line in self.screen.query(StatusLine):
            line.update(status_text("set", f"{view.url}/v1", None, STATE_STYLE["ready"]))
        self.query_one("#server-state", Static).update(text)

    def show_actuals(self, rows: Sequence[ActualRow] | None) -> None:
        """Predicted vs actual memory after boot, one line per part (the session's Actuals)."""
        text = Text()
        if rows:
            text.append("predicted → actual", style="bold")
            for row in rows:
                text.append(f"\n{row.name}: {_size(row.predicted)} → {_size(row.actual)}")
        self.query_one("#server-actuals", Static).update(text)

    def append_log(self, lines: list[str]) -> None:
        """Add lines the supervisor pushed (the oldest drop out past ``LOG_LINES``)."""
        if not lines:
            return
        self._all.extend(lines)
        needle = self._needle.lower()
        shown = [line for line in lines if needle in line.lower()] if needle else lines
        if shown:
            self.query_one("#log", Log).write_lines(shown)

    def search(self, query: str) -> None:
        """Show only the lines containing ``query`` (case-insensitive); "" shows all."""
        self._needle = query
        log = self.query_one("#log", Log)
        log.clear()
        log.write_lines(self.visible_lines)

    @property
    def visible_lines(self) -> list[str]:
        """The log lines on show (after the search)."""
        needle = self._needle.lower()
        return [line for line in self._all if needle in line.lower()]

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "log-search":
            event.stop()
            self.search(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the search: the lines stay filtered, the keys go back to the models."""
        if event.input.id == "log-search":
            event.stop()
            self._hand_back()

    def on_key(self, event: Key) -> None:
        search = self.query_one("#log-search", Input)
        if event.key == "escape" and (search.has_focus or self._needle):
            event.stop()
            search.value = ""
            self.search("")
            self._hand_back()

    def _hand_back(self) -> None:
        """The keys back to the app's models menu (a panel on its own: to its log)."""
        menu = self.app.query("#models")
        (menu.first() if menu else self.query_one("#log", Log)).focus()

    def focus_search(self) -> bool:
        """The log's search focused, and the panel brought into view with it (its page in
        the narrow layout, scrolled to in a column taller than the screen); False when the
        panel is not shown at all."""
        search = self.query_one("#log-search", Input)
        if not self.display or not search.display:
            return False
        search.focus()
        self.call_after_refresh(self.scroll_visible, animate=False)
        return True

    def clear_log(self) -> None:
        self._all.clear()
        self.query_one("#log", Log).clear()
        self.query_one("#server-actuals", Static).update("")


def _size(value: int | None) -> str:
    from homelab.units import format_bytes

    return "—" if value is None else format_bytes(value)


QUOTED_SHOWN = 2
"""The engine's own lines a failure shows on the panel (all of them are in the log below)."""


def failure_text(failure: EngineFailure, past: bool = False) -> Text:
    """An ``EngineFailure`` as a person reads it: title, what happened, the engine's own
    first lines, the next step; ``past``: the last crash, once the engine came back."""
    if past:
        text = Text(f"last crash: {failure.title}: {failure.message}", style="dim")
        if failure.quoted:
            text.append(f"\n  the engine said: {failure.quoted[0]}", style="dim")
        return text
    text = Text(failure.title, style="bold red")
    text.append(f": {failure.message}", style="red")
    for i, line in enumerate(failure.quoted[:QUOTED_SHOWN]):
        text.append(f"\n  {'the engine said: ' if i == 0 else ''}{line}", style="red")
    if failure.hint:
        text.append(f"\n{failure.hint}", style="italic")
    return text
