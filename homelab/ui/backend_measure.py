"""Stored ``homelab bench`` results for the TUI's plan panel (the domain calls, like
:mod:`homelab.ui.backend`): the measured line next to the memory answer, and a compact
text chart of TTFT and tokens/s against concurrency."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel
    from homelab.plan.planner import Plan


def measured(plan: Plan, model: GgufModel) -> tuple[str, ...]:
    """The stored benches of what ``plan`` would run: one line each, then the newest's
    chart; () when nothing was measured."""
    from homelab.measure.summary import measured_line
    from homelab.measure.text_chart import chart_lines
    from homelab.serve.judge import benches

    records = benches(plan, model)
    if not records:
        return ()
    newest = max(records, key=lambda r: str(r.get("recorded_at")))
    lines = [measured_line(r, plan.settings.n_seq) for r in records]
    return (*lines, *chart_lines(newest["report"], width=12))
