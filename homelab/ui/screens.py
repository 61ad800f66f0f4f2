"""The app's dialogs: confirm what costs minutes or kills an engine (a switch, a build, a
stop), what to do with a running engine on quit, and the path of a llama-server to use.

Each answers from the keyboard alone: y or enter says yes, n or escape says no (quit: s
stops, l leaves it running, n or escape stays); while one is up no key of the app acts."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

_CSS = """
{name} {{ align: center middle; }}
{name} > Vertical {{
    width: 72; height: auto; border: thick $warning; background: $surface; padding: 1 2;
}}
{name} Horizontal {{ height: auto; margin-top: 1; }}
{name} Button {{ margin-right: 2; }}
"""


class ConfirmScreen(ModalScreen[bool]):
    """A question with yes (y, enter) / no (n, escape); ``yes``: the yes button's words."""

    DEFAULT_CSS = _CSS.format(name="ConfirmScreen")
    BINDINGS = [
        Binding("y", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str, yes: str = "Yes") -> None:
        super().__init__()
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question)
            with Horizontal():
                yield Button(f"{self.yes} (y, enter)", id="yes", variant="warning")
                yield Button("No (n, esc)", id="no")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()  # enter says yes (tab, then enter: no)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)


class QuitScreen(ModalScreen[str]):
    """Quit with an engine running: stop it (s), leave it running (l), or stay (escape)."""

    DEFAULT_CSS = _CSS.format(name="QuitScreen")
    BINDINGS = [
        Binding("s", "answer('stop')", "stop it"),
        Binding("l", "answer('leave')", "leave it running"),
        Binding("n,escape", "answer('cancel')", "cancel"),
    ]

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                f"{self.what} is running.\n\nStop it, or leave it running? "
                "(left running, homelab's keeper restarts it and its gate after a crash; "
                "`homelab stop` stops it)"
            )
            with Horizontal():
                yield Button("Stop it (s)", id="stop", variant="error")
                yield Button("Leave running (l)", id="leave", variant="primary")
                yield Button("Cancel (n, esc)", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(str(event.button.id))

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer)


class EnginePathScreen(ModalScreen[str | None]):
    """Ask for the path of a llama-server the user has: enter gives it, escape cancels."""

    DEFAULT_CSS = _CSS.format(name="EnginePathScreen")
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, value: str = "") -> None:
        super().__init__()
        self.value = value

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                "The llama-server to run (a path; it is checked, then kept in the TUI "
                "settings for the next start):"
            )
            yield Input(self.value, placeholder="/path/to/llama-server", id="engine-path")
            with Horizontal():
                yield Button("Use it (enter)", id="use", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#engine-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._answer()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "use":
            self._answer()
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _answer(self) -> None:
        value = self.query_one("#engine-path", Input).value.strip()
        self.dismiss(value or None)
