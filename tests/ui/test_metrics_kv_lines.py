"""The live panel's KV lines keep the panel short: a line per slot for a few slots, a total
and one fill glyph per slot for an agent plan's many (32 slots once pushed the server
panel, with its URL, off a 45-line terminal)."""

from __future__ import annotations

from rich.text import Text

from homelab.ui.widgets.metrics import LISTED_SLOTS, fill_glyph, kv_lines


def _lines(slots) -> list[str]:
    text = Text()
    kv_lines(text, tuple(slots))
    return text.plain.splitlines()


def test_a_few_slots_get_a_line_each() -> None:
    lines = _lines([(0, 1200, 4096), (1, 0, 4096)])
    assert lines == ["KV slot 0: 1,200/4,096 cells (29%)", "KV slot 1: 0/4,096 cells (0%)"]


def test_many_slots_get_three_lines_whatever_their_number() -> None:
    slots = [(i, 0, 8192) for i in range(32)]
    slots[5] = (5, 8192, 8192)
    slots[9] = (9, 10, 8192)
    lines = _lines(slots)
    assert len(lines) == 3
    assert lines[0] == "KV 8,202/262,144 cells (3%) over 32 slots"
    assert lines[1] == "fullest: slot 5, 8,192/8,192 cells"
    glyphs = lines[2].removeprefix("slots [").removesuffix("]")
    assert len(glyphs) == 32
    assert glyphs[5] == "█" and glyphs[9] == "▁" and glyphs[0] == " "
    assert len(_lines([(i, 0, 8192) for i in range(LISTED_SLOTS + 1)])) == 2  # none held


def test_fill_glyph_never_draws_a_used_slot_empty_and_marks_unknown_sizes() -> None:
    assert fill_glyph(0, 100) == " "
    assert fill_glyph(1, 10_000) == "▁"
    assert fill_glyph(100, 100) == "█"
    assert fill_glyph(5, 0) == "?"
