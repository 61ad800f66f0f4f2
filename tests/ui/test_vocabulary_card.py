"""The card panel in the CLI's words and format (issue 21): the bar's last part is named as
what it is (usable after headroom, or spare once a plan is in), and every size is written as
``homelab gpu`` writes it (a kwin_wayland of 1.16 GiB is not "1 GiB")."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from homelab.cli.gpu_cmd import render
from homelab.gpu.probe import probe
from homelab.plan.budget import device_budget
from homelab.ui.app import make_app
from homelab.ui.widgets.card import legend, segments
from homelab.units import format_bytes
from tests.ui.helpers import GPU_FIXTURES, run, wait_until

CARD = GPU_FIXTURES / "rtx3090_wayland.json"


def test_the_free_part_is_named_usable_after_headroom_in_the_clis_format() -> None:
    budget = device_budget(probe(snapshot=CARD, window_s=0))
    words = legend(segments(budget, None), planned=False).plain
    assert f"usable after headroom {format_bytes(budget.usable)}" in words
    assert "free " not in words  # the driver's free (`homelab gpu`) is another figure
    assert f"desktop {format_bytes(budget.desktop)}" in words


def test_the_process_table_writes_sizes_as_homelab_gpu_does() -> None:
    report = probe(snapshot=CARD, window_s=0)
    kwin = next(p for d in report.devices for p in d.processes or () if "kwin" in (p.name or ""))
    figure = format_bytes(kwin.used_bytes)
    assert figure in render(report)  # `homelab gpu`'s process row

    async def drive() -> None:
        app = make_app(gpu_snapshot=CARD, models_dirs=[], refresh_s=0, blink=False, adopt=False)
        async with app.run_test(size=(140, 45)) as pilot:
            table = app.query_one("#processes", DataTable)
            await wait_until(pilot, lambda: table.row_count > 0)
            rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
            (row,) = [r for r in rows if "kwin" in r[2]]
            assert row[4] == figure, row
            card = app.query_one("#card-text").render()
            text = card.plain if isinstance(card, Text) else str(card)
            assert "usable after headroom" in text or "spare after the plan" in text

    run(drive())
