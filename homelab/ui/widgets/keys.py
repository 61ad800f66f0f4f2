"""The footer: the line that says why (a key that cannot act now, what a key just did) over
the keys, in as many rows as the width needs.

One widget drawn as text, not Textual's ``Footer``: that one is a widget per key, composed
again after every focus change (the keys a focused field adds), and at 80×24 the mounting
alone put a key's effect ~60–100 ms after the key (``bench/bench_tui_keys.py``). A key here
is a click target as it is there (``app.simulate_key``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual.app import RenderResult
from textual.geometry import Size
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget

MAX_ROWS = 3
"""Rows the keys may take (the app's 13 keys need 3 at 80 columns); keys past them are not
drawn (they still act)."""
SAY_ROWS = 1
"""Rows of the line that says why, always there (blank while nothing is said), so that saying
something changes no layout; a longer message ends in an ellipsis there and is shown whole as
a notification too (:meth:`KeysFooter.fits`)."""


@dataclass(frozen=True)
class ShownKey:
    """One key in the footer: the key Textual names (``slash``), how it is shown (``/``),
    what it does, and whether it can act now (a disabled one is dimmed)."""

    key: str
    display: str
    description: str
    enabled: bool = True

    @property
    def cells(self) -> int:
        """Cells it takes: its key, its words and their padding."""
        return cell_len(self.display) + cell_len(self.description) + 3


@dataclass(frozen=True)
class Said:
    """What the footer says over the keys (and :attr:`HomelabApp.said` keeps)."""

    message: str
    title: str = ""
    severity: SeverityLevel = "information"

    @property
    def line(self) -> str:
        first = self.message.strip().splitlines()[0] if self.message.strip() else ""
        return f"{self.title}: {first}" if self.title else first


def columns_that_fit(widths: list[int], room: int) -> int:
    """The most grid columns (keys per row) whose widest cells add up to at most ``room``."""
    for n in range(len(widths), 1, -1):
        columns = [max(widths[i::n]) for i in range(n)]
        if sum(columns) <= room:
            return n
    return 1


def wrapped(text: str, width: int, rows: int) -> tuple[list[str], bool]:
    """``text`` in at most ``rows`` lines of ``width`` cells, broken at spaces, and whether
    some was left out (the last line then ends in an ellipsis)."""
    words, lines, line = text.split(), [], ""
    for word in words:
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= width or not line:
            line = candidate
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    cut = len(lines) > rows or any(cell_len(x) > width for x in lines[:rows])
    lines = lines[:rows]
    if cut and lines:
        last = lines[-1]
        while last and cell_len(last) + 1 > width:
            last = last[:-1]
        lines[-1] = last.rstrip() + "…"
    return lines, cut


def _rows(keys: list[ShownKey], width: int) -> list[list[ShownKey]]:
    if not keys:
        return []
    n = columns_that_fit([k.cells for k in keys], width)
    return [keys[i : i + n] for i in range(0, len(keys), n)]


class KeysFooter(Widget):
    """See the module docstring."""

    DEFAULT_CSS = """
    KeysFooter { height: auto; background: $footer-background; color: $footer-foreground; }
    KeysFooter > .keys-footer--key { color: $footer-key-foreground; text-style: bold; }
    KeysFooter > .keys-footer--description { color: $footer-description-foreground; }
    KeysFooter > .keys-footer--disabled { color: $text-disabled; }
    KeysFooter > .keys-footer--said { background: $primary 40%; color: $text; }
    KeysFooter > .keys-footer--said-warning { background: $warning 40%; color: $text; }
    KeysFooter > .keys-footer--said-error { background: $error 50%; color: $text; }
    """
    COMPONENT_CLASSES = {
        "keys-footer--key",
        "keys-footer--description",
        "keys-footer--disabled",
        "keys-footer--said",
        "keys-footer--said-warning",
        "keys-footer--said-error",
    }

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shown: list[ShownKey] = []
        self.said: Said | None = None
        self._clear_timer: Timer | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self._bindings_changed(self.screen)

    # -- what it shows ---------------------------------------------------------------------

    def _bindings_changed(self, screen: Screen) -> None:
        if not self.is_attached or screen is not self.screen:
            return
        shown = self.active_keys()
        if shown != self.shown:
            width = self.size.width or self.app.size.width
            rows = len(self.key_rows(width))
            self.shown = shown
            self.refresh(layout=len(self.key_rows(width)) != rows)

    def active_keys(self) -> list[ShownKey]:
        """The screen's keys to show now, one per action (the first key bound to it), and the
        command palette's last."""
        keys: list[ShownKey] = []
        palette: list[ShownKey] = []
        actions: set[str] = set()
        for _node, binding, enabled, _tip in self.screen.active_bindings.values():
            is_palette = binding.key == self.app.COMMAND_PALETTE_BINDING
            if is_palette and not self.app.ENABLE_COMMAND_PALETTE:
                continue
            if not is_palette and (not binding.show or binding.action in actions):
                continue
            actions.add(binding.action)
            shown = ShownKey(
                binding.key, self.app.get_key_display(binding), binding.description, enabled
            )
            (palette if is_palette else keys).append(shown)
        return keys + palette

    def say(self, said: Said, timeout_s: float) -> None:
        """Show ``said`` over the keys until ``timeout_s`` pass or something else is said."""
        if self._clear_timer is not None:
            self._clear_timer.stop()
        self.said = said
        self._clear_timer = self.set_timer(timeout_s, self.unsay)
        self.refresh()

    def unsay(self) -> None:
        self._clear_timer = None
        if self.said is not None:
            self.said = None
            self.refresh()

    def fits(self, said: Said, width: int) -> bool:
        """Whether the footer shows ``said`` whole (one line of message, within its rows)."""
        single = "\n" not in said.message.strip()
        return single and not wrapped(said.line, max(width - 2, 1), SAY_ROWS)[1]

    # -- drawing ---------------------------------------------------------------------------

    def _said_lines(self, width: int) -> list[str]:
        if self.said is None:
            return [""] * SAY_ROWS
        lines = wrapped(self.said.line, max(width - 2, 1), SAY_ROWS)[0]
        return lines + [""] * (SAY_ROWS - len(lines))

    def key_rows(self, width: int) -> list[list[ShownKey]]:
        """The keys in rows of equal columns; the command palette's key (ctrl+p, Textual's
        own) is left out where it alone would take a row of a narrow screen."""
        rows = _rows(self.shown, width)
        if self.shown and self.shown[-1].key == self.app.COMMAND_PALETTE_BINDING:
            without = _rows(self.shown[:-1], width)
            if len(without) < len(rows):
                rows = without
        return rows[:MAX_ROWS]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._said_lines(width)) + len(self.key_rows(width)) or 1

    def render(self) -> RenderResult:
        width = self.size.width or self.app.size.width
        lines: list[Text] = []
        said = self.said
        style = Style()
        if said is not None:
            severity = "" if said.severity == "information" else f"-{said.severity}"
            style = self.get_component_rich_style(f"keys-footer--said{severity}")
        for line in self._said_lines(width):
            lines.append(Text(f" {line}".ljust(width) if said else "", style=style))
        rows = self.key_rows(width)
        if rows:
            n = len(rows[0])
            keys = [k for row in rows for k in row]
            columns = [max(k.cells for k in keys[i::n]) for i in range(n)]
            for row in rows:
                lines.append(self._key_row(row, columns))
        return Text("\n", end="").join(lines)

    def _key_row(self, row: list[ShownKey], columns: list[int]) -> Text:
        key_style = self.get_component_rich_style("keys-footer--key")
        words_style = self.get_component_rich_style("keys-footer--description")
        off_style = self.get_component_rich_style("keys-footer--disabled")
        line = Text(no_wrap=True, end="")
        for key, cells in zip(row, columns, strict=False):
            click = Style(meta={"@click": f"app.simulate_key({key.key!r})"})
            line.append(f" {key.display} ", (key_style if key.enabled else off_style) + click)
            words = f"{key.description} ".ljust(cells - cell_len(key.display) - 2)
            line.append(words, (words_style if key.enabled else off_style) + click)
        return line
