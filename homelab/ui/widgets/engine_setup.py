"""The engine-setup panel: no llama-server was found, and how to get one from the app.

Shown above the server panel only while there is no engine to run (and while a build
runs or its outcome is news); hidden otherwise. It offers the two ways (``b`` builds it,
``e`` uses a binary the user has), shows the build's lines and progress, and words every
error as its title, message and hint.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Static

from homelab.errors import HomelabError

TAIL_LINES = 8
"""An error's message (a failed build carries its log tail) is cut to its first line and
its last lines."""
OFFER = (
    "\n f  fetch llama.cpp's prebuilt engine for this card (`homelab engine fetch`, seconds)"
    "\n b  build it here (`homelab engine build`, once; CUDA where a card is)"
    "\n e  use a llama-server you have (give its path)"
)


class EngineSetupPanel(Vertical):
    DEFAULT_CSS = """
    EngineSetupPanel {
        display: none; height: auto; border: round $warning; padding: 0 1;
    }
    EngineSetupPanel #setup-progress { display: none; width: 1fr; }
    EngineSetupPanel #setup-progress Bar { width: 1fr; }
    EngineSetupPanel Static { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="setup-text")
        yield ProgressBar(total=1.0, show_eta=False, id="setup-progress")
        yield Static("", id="setup-line")

    def on_mount(self) -> None:
        self.border_title = "engine setup"

    def show_missing(self) -> None:
        """No llama-server: the offer (the server panel says what was looked for)."""
        self.display = True
        self._text(Text.assemble(("No llama-server to run.", "bold"), OFFER))
        self._bar(None)
        self._line(Text())

    def show_building(self, fetch: bool = False) -> None:
        self.display = True
        doing = "Fetching the prebuilt llama-server…" if fetch else "Building llama-server…"
        self._text(Text.assemble((doing, "bold"), ("  escape cancels", "dim")))
        self._bar(0.0)
        self._line(Text("starting", style="dim"))

    def show_progress(self, fraction: float | None, line: str) -> None:
        """One line of the build (and how far it is, when the line says)."""
        if fraction is not None:
            self._bar(fraction)
        self._line(Text(line))

    def show_checking(self, path: str) -> None:
        self.display = True
        self._line(Text(f"checking {path}…", style="dim"))

    def show_cancelled(self) -> None:
        self._text(Text.assemble(("Build cancelled.", "bold yellow"), OFFER))
        self._bar(None)
        self._line(Text("b builds again (what was built so far is kept)", style="dim"))

    def show_error(self, error: HomelabError) -> None:
        """A failed build or a binary that will not do, as title, message and hint."""
        self.display = True
        self._text(Text.assemble((error.title, "bold red"), OFFER))
        self._bar(None)
        self._line(error_text(error))

    def hide(self) -> None:
        self.display = False

    def _text(self, text: Text) -> None:
        self.query_one("#setup-text", Static).update(text)

    def _line(self, text: Text) -> None:
        line = self.query_one("#setup-line", Static)
        line.display = bool(text.plain)
        line.update(text)

    def _bar(self, fraction: float | None) -> None:
        bar = self.query_one("#setup-progress", ProgressBar)
        bar.display = fraction is not None
        if fraction is not None:
            bar.update(progress=fraction)


def error_text(error: HomelabError) -> Text:
    """``message`` (what failed, then its last :data:`TAIL_LINES` lines) in red, the hint."""
    lines = error.message.splitlines()
    if len(lines) > TAIL_LINES + 1:
        lines = [lines[0], "…", *lines[-TAIL_LINES:]]
    text = Text("\n".join(lines), style="red")
    if error.hint:
        text.append(f"\n{error.hint}", style="italic")
    return text
