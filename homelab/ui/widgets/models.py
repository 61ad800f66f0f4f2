"""The models menu: presets, GGUFs in the HF cache and in the models folders, with verdicts.

``/`` shows the filter; typing narrows the rows; enter picks the first match. Enter on a
row picks it (posts :class:`ModelsMenu.Picked`). A verdict longer than the room the
other columns leave is shown compact, or shortened at a clause, never inside a number
(:func:`~homelab.ui.catalog.fitted`); long model names are shortened first, so the table
is never wider than the panel. Both are worded again when the terminal is resized.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Input

from homelab.ui.catalog import (
    FROM_PRESET_LEGEND,
    PRESET_LEGEND,
    PRESET_MARK,
    Judgement,
    ModelEntry,
    fitted,
    matches,
    size_text,
)

VERDICT_STYLE = {
    "fits": "green",
    "partial": "yellow",
    "does_not_fit": "red",
    "unknown": "dim",
    "pending": "dim italic",
}
MIN_VERDICT_CELLS = 4
"""The least room a verdict is given (its word: ``fits``), however narrow the menu."""
VERDICT_WANTED = 20
"""Cells a verdict is given before the model names are shortened (``fits: 262k × 32 †``)."""
MIN_NAME_CELLS = 16
"""The least a model's name is shortened to (with an ellipsis) to make room for its verdict."""


class ModelsMenu(Vertical):
    """The menu; holds its rows and their verdicts."""

    DEFAULT_CSS = """
    ModelsMenu { border: round $primary; padding: 0 1; height: 2fr; }
    ModelsMenu #filter { display: none; }
    ModelsMenu.filtering #filter { display: block; }
    ModelsMenu DataTable { height: 1fr; }
    """
    BINDINGS = [Binding("escape", "close_filter", "close filter", show=False)]

    class Picked(Message):
        def __init__(self, entry: ModelEntry) -> None:
            super().__init__()
            self.entry = entry

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.entries: list[ModelEntry] = []
        self.judgements: dict[str, Judgement] = {}
        self.query_text = ""

    def compose(self) -> ComposeResult:
        yield Input(placeholder="filter models…", id="filter")
        table: DataTable = DataTable(id="models", cursor_type="row", zebra_stripes=False)
        table.add_column("model", key="model")
        table.add_column("quant", key="quant")
        table.add_column("size", key="size")
        table.add_column("verdict", key="verdict")
        yield table

    def on_mount(self) -> None:
        self.border_title = "models"
        self.border_subtitle = "listing…"

    def on_resize(self) -> None:
        self._reword()

    # -- data ------------------------------------------------------------------------------

    def set_entries(self, entries: list[ModelEntry]) -> None:
        self.entries = entries
        self._fill()

    def set_judgement(self, key: str, judgement: Judgement) -> None:
        self.judgements[key] = judgement
        table = self.query_one("#models", DataTable)
        if key in table.rows:
            table.update_cell(key, "size", size_text(self._entry_size(key)), update_width=True)
            self._reword()  # the size column may have grown: every verdict's room with it
        self._subtitle()

    def _subtitle(self) -> None:
        """The count of rows (those shown of those listed while a filter hides some), what ★
        means while a preset is listed, and what † means while a verdict is from a preset's
        facts."""
        shown, listed = len(self.visible_entries()), len(self.entries)
        subtitle = f"{listed} models" if shown == listed else f"{shown} of {listed} models"
        if any(e.source == "preset" for e in self.entries):
            subtitle += f" · {PRESET_LEGEND}"
        if any(j.from_preset for j in self.judgements.values()):
            subtitle += f" · {FROM_PRESET_LEGEND}"
        self.border_subtitle = subtitle

    def forget(self, keys: set[str]) -> None:
        """Drop the verdicts of rows no longer listed."""
        for key in keys:
            self.judgements.pop(key, None)

    def clear_judgements(self) -> None:
        self.judgements.clear()
        self._fill()

    def visible_entries(self) -> list[ModelEntry]:
        return [e for e in self.entries if matches(e, self.query_text)]

    def _entry_size(self, key: str) -> int | None:
        judged = self.judgements.get(key)
        entry = next((e for e in self.entries if e.key == key), None)
        if judged is not None and judged.size is not None:
            return judged.size
        return entry.size if entry else None

    def _verdict(self, key: str) -> Text:
        judged = self.judgements.get(key)
        if judged is None:
            return Text("judging…", style=VERDICT_STYLE["pending"])
        return Text(fitted(judged, self._verdict_room()), style=VERDICT_STYLE[judged.verdict])

    def _free_cells(self) -> int:
        """Cells the model and verdict columns share once quant and size are drawn."""
        table = self.query_one("#models", DataTable)
        others = sum(
            column.get_render_width(table)
            for key, column in table.columns.items()
            if key.value in ("quant", "size")
        )
        # the vertical scrollbar's cells are kept free whether it shows or not: it comes and
        # goes with the rows, and a verdict worded before it came would run under it
        inner = table.size.width - table.styles.gutter.width - table.styles.scrollbar_size_vertical
        return inner - others - 4 * table.cell_padding

    def _name_cells(self) -> int:
        """Cells a model's name gets: all it needs, unless the verdicts then have fewer
        than ``VERDICT_WANTED`` (the names are shortened first, to ``MIN_NAME_CELLS``)."""
        names = max((cell_len(self._label(e).plain) for e in self.visible_entries()), default=5)
        verdicts = max((cell_len(j.compact or j.text) for j in self.judgements.values()), default=0)
        wanted = min(max(verdicts, len("judging…")), VERDICT_WANTED)
        free = self._free_cells()
        return names if names + wanted <= free else max(MIN_NAME_CELLS, free - wanted)

    def _verdict_room(self) -> int:
        """Cells the verdict column has once the other columns are drawn: the table never
        runs wider than the panel, so a verdict is never hidden past its right edge."""
        names = max((cell_len(self._label(e).plain) for e in self.visible_entries()), default=5)
        room = self._free_cells() - min(names, self._name_cells())
        return max(room, MIN_VERDICT_CELLS)

    def _label(self, entry: ModelEntry, width: int | None = None) -> Text:
        """The model's cell: its name (shortened to ``width`` with an ellipsis), a preset's ★."""
        star = PRESET_MARK if entry.source == "preset" else ""
        name = entry.name
        if width is not None and cell_len(name + star) > width:
            name = name[: max(width - cell_len(star) - 1, 1)] + "…"
        label = Text(name)
        if star:
            label.append(star, style="yellow")
        return label

    def _reword(self) -> None:
        """Each name and verdict again for the room there is now (after a resize or a new row)."""
        table = self.query_one("#models", DataTable)
        width = self._name_cells()
        for entry in self.visible_entries():
            if entry.key in table.rows:
                table.update_cell(entry.key, "model", self._label(entry, width), update_width=True)
        for key in self.judgements:
            if key in table.rows:
                table.update_cell(key, "verdict", self._verdict(key), update_width=True)

    def _fill(self) -> None:
        """The rows again; the highlighted model stays highlighted (and in view) when it is
        still listed: a refill must never move the cursor to a model the person did not pick."""
        table = self.query_one("#models", DataTable)
        current = self._cursor_key(table)
        table.clear()
        for entry in self.visible_entries():
            table.add_row(
                self._label(entry),
                entry.quant or "",
                size_text(self._entry_size(entry.key)),
                self._verdict(entry.key),
                key=entry.key,
            )
        self._reword()  # the other columns' widths are known now
        if current is not None and current in table.rows:
            table.move_cursor(row=table.get_row_index(current), scroll=True)
        self._subtitle()

    @staticmethod
    def _cursor_key(table: DataTable) -> str | None:
        """The key of the highlighted row; None when the table is empty."""
        if not table.row_count:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    # -- filter and pick -------------------------------------------------------------------

    def open_filter(self) -> None:
        self.add_class("filtering")
        self.query_one("#filter", Input).focus()

    def action_close_filter(self) -> None:
        self.remove_class("filtering")
        self.query_one("#filter", Input).value = ""
        self.query_text = ""
        self._fill()
        self.query_one("#models", DataTable).focus()

    @on(Input.Changed, "#filter")
    def _narrow(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self._fill()

    @on(Input.Submitted, "#filter")
    def _pick_first(self, event: Input.Submitted) -> None:
        rows = self.visible_entries()
        self.action_close_filter()  # the whole menu again, the picked row highlighted
        if rows:
            table = self.query_one("#models", DataTable)
            table.move_cursor(row=table.get_row_index(rows[0].key))
            self.post_message(self.Picked(rows[0]))

    @on(DataTable.RowSelected, "#models")
    def _picked(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        entry = next((e for e in self.entries if e.key == key), None)
        if entry is not None:
            self.post_message(self.Picked(entry))
