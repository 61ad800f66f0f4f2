"""The footer, its keys in as many rows as the width needs (Textual's own keeps one row
and cuts it at the screen's edge, which at 80 columns hid half of the keys)."""

from __future__ import annotations

from rich.cells import cell_len
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

MAX_ROWS = 3
"""Rows the keys may take; past them the footer scrolls as Textual's does."""


def columns_that_fit(widths: list[int], room: int) -> int:
    """The most grid columns (keys per row) whose widest cells add up to at most ``room``."""
    for n in range(len(widths), 1, -1):
        columns = [max(widths[i::n]) for i in range(n)]
        if sum(columns) <= room:
            return n
    return 1


class KeysFooter(Footer):
    DEFAULT_CSS = f"""
    KeysFooter {{ dock: none; layout: grid; grid-columns: auto; height: auto; max-height: {MAX_ROWS}; }}
    """

    def on_resize(self) -> None:
        self._fit()

    def on_mount(self) -> None:
        super().on_mount()
        self._fit()

    async def recompose(self) -> None:
        await super().recompose()
        self._fit()

    def _fit(self) -> None:
        keys = [k for k in self.query(FooterKey) if not k.has_class("-command-palette")]
        if not keys:
            return
        palette = sum(
            _width(k) + 1 for k in self.query(FooterKey) if k.has_class("-command-palette")
        )
        widths = [_width(k) for k in keys]
        room = (self.size.width or self.app.size.width) - palette
        self.styles.grid_size_columns = columns_that_fit(widths, room)


def _width(key: FooterKey) -> int:
    """Cells one key takes: its key, its words and their padding (``FooterKey``'s CSS)."""
    return cell_len(key.key_display) + cell_len(key.description) + 3
