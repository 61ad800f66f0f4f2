"""The card panel: name, driver, a stacked VRAM bar per card, and the process table.

Every card gets a bar; when the plan splits the model over several devices, each bar shows
that device's share and a line says which layers it holds (workers' devices follow the cards).

The bar reads left to right: reserved | desktop | other processes | this engine
(weights · KV · compute) | headroom | free. "This engine" is the running engine's plan,
or, when none runs, the picked model's plan ("what it would take").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from homelab.plan.vocabulary import SPARE, USABLE
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.errors import HomelabError
    from homelab.gpu.report import GpuReport
    from homelab.plan.budget import DeviceBudget
    from homelab.plan.headroom import DesktopGrowth
    from homelab.plan.planner import Plan
    from homelab.plan.split import DeviceShare

SetHeld = list[tuple[str, dict[str, int]]]
"""A set's resident models: (id, bytes per llama.cpp device) each."""

BAR_WIDTH = 50
"""Cells of the stacked bar before the panel has a width; then it is as wide as the panel."""

SEGMENTS = (
    ("reserved", "grey50"),
    ("desktop", "magenta1"),
    ("other", "yellow"),
    ("weights", "green"),
    ("KV", "cyan"),
    ("compute", "dodger_blue1"),
    ("headroom", "red1"),
    ("free", "grey23"),
)
"""Segment names in bar order, with their colours (the legend uses the same). Desktop,
compute and headroom are of the 256-colour palette: the theme maps the 16 ANSI colours,
and its magenta is its red (the legend gave desktop and headroom one colour)."""


def share_for(plan: Plan | None, budget: DeviceBudget) -> DeviceShare | None:
    """The plan's share of this device, or None."""
    if plan is None:
        return None
    for share in plan.devices:
        if share.device.budget.name == budget.name:
            return share
    return None


def segments(budget: DeviceBudget, share: DeviceShare | None) -> list[tuple[str, int]]:
    """(name, bytes) of each part of the bar; the engine's parts only for a plan's share."""
    engine = {"weights": 0, "KV": 0, "compute": 0}
    if share is not None:
        engine = {
            "weights": share.weights,
            "KV": share.kv,
            "compute": share.engine.total,
        }
    used = budget.reserved + budget.desktop + budget.other + budget.headroom + sum(engine.values())
    sizes = {
        "reserved": budget.reserved,
        "desktop": budget.desktop,
        "other": budget.other,
        **engine,
        "headroom": budget.headroom,
        "free": max(0, budget.total - used),
    }
    return [(name, sizes[name]) for name, _colour in SEGMENTS]


MODEL_COLOURS = ("green", "cyan", "dodger_blue1", "orchid1", "gold1", "spring_green2")
"""Each resident model of a set, in the list's order (a seventh takes the first's again)."""
MODEL = "model:"
"""The prefix of a set's model's part (its id follows): never one of the fixed parts."""


def colours_of(parts: list[tuple[str, int]]) -> dict[str, str]:
    """The fixed parts' colours and one per model of a set."""
    colours = dict(SEGMENTS)
    models = [name for name, _size in parts if name.startswith(MODEL)]
    for i, name in enumerate(models):
        colours[name] = MODEL_COLOURS[i % len(MODEL_COLOURS)]
    return colours


def set_segments(budget: DeviceBudget, held: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The bar's parts with each model of a set (id, bytes on this device) where one
    engine's weights, KV and compute go."""
    parts = segments(budget, None)
    fixed = [(name, size) for name, size in parts if name not in ENGINE_PARTS]
    models = [(MODEL + ident, size) for ident, size in held if size > 0]
    free = max(0, dict(parts)["free"] - sum(size for _name, size in models))
    head = [p for p in fixed if p[0] not in ("headroom", "free")]
    return [*head, *models, ("headroom", budget.headroom), ("free", free)]


def device_name(report: GpuReport, budgets: list[DeviceBudget], budget: DeviceBudget) -> str:
    """The llama.cpp device a card's budget is (``CUDA0``), ``CPU`` for system RAM."""
    if budget.kind == "cpu":
        return "CPU"
    i = budgets.index(budget)
    return f"CUDA{report.devices[i].index}" if i < len(report.devices) else budget.name


def bar(parts: list[tuple[str, int]], total: int, width: int = BAR_WIDTH) -> Text:
    """The stacked bar: each part gets cells in proportion (a non-zero part at least one)."""
    colours = colours_of(parts)
    cells: list[tuple[str, int]] = []
    for name, size in parts:
        if size > 0:
            cells.append((name, max(1, round(width * size / total)) if total else 0))
    overflow = sum(n for _name, n in cells) - width
    while overflow > 0 and cells:  # rounding gave too many: take them from the largest part
        i = max(range(len(cells)), key=lambda k: cells[k][1])
        cells[i] = (cells[i][0], cells[i][1] - 1)
        overflow -= 1
    text = Text()
    for name, n in cells:
        text.append("█" * n, style=colours[name])
    if overflow < 0:
        text.append("█" * -overflow, style=colours["free"])
    return text


def holds(share: DeviceShare) -> str:
    """Which layers a device holds in a split, as llama-server is told (``--device`` name)."""
    output = " + output layer" if share.output else ""
    return f"{share.device.llama_name}: {share.block_range}{output} ({share.layers} of the split)"


ENGINE_PARTS = ("weights", "KV", "compute")


def legend(parts: list[tuple[str, int]], planned: bool) -> Text:
    """Each part's name and size; the free part named as what it is (the words of
    :mod:`homelab.plan.vocabulary`): usable after headroom, or spare once a plan is in."""
    colours = colours_of(parts)
    engine = any(size > 0 for name, size in parts if name in ENGINE_PARTS or MODEL in name)
    text = Text()
    for i, (name, size) in enumerate(p for p in parts if p[1] > 0):
        if i:
            text.append("  ")
        text.append("■ ", style=colours[name])
        label = f"{name} (plan)" if planned and name in ENGINE_PARTS else name
        label = label.removeprefix(MODEL)
        if name == "free":
            label = SPARE if engine else USABLE
        text.append(f"{label} {format_bytes(size)}")
    return text


class CardPanel(Vertical):
    """Card(s), bar(s), processes; ``show`` renders one card read."""

    DEFAULT_CSS = """
    CardPanel { height: auto; border: round $primary; padding: 0 1; }
    CardPanel #card-text { height: auto; }
    CardPanel DataTable { height: auto; max-height: 9; }
    CardPanel #growth { height: auto; display: none; color: $warning; text-style: bold; }
    """

    def compose(self) -> ComposeResult:
        yield Static("probing the card…", id="card-text")
        yield Static("", id="growth")
        table: DataTable = DataTable(id="processes", cursor_type="none", show_cursor=False)
        table.add_columns("GPU", "pid", "name", "class", "VRAM")
        yield table

    def on_mount(self) -> None:
        self.border_title = "card"
        self._shown: (
            tuple[GpuReport, list[DeviceBudget], Plan | None, bool, SetHeld | None] | None
        ) = None

    def on_resize(self) -> None:
        """The bars drawn again as wide as the panel is now."""
        if self._shown is not None:
            self.call_after_refresh(self._redraw)

    def _redraw(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(
        self,
        report: GpuReport,
        budgets: list[DeviceBudget],
        plan: Plan | None,
        planned: bool,
        held: SetHeld | None = None,
    ) -> None:
        """Render ``report`` with one budget per card; ``plan`` fills the engine's part, or
        ``held`` (a set of models: each resident's id and bytes per device) one part each."""
        self._shown = (report, budgets, plan, planned, held)
        box = self.query_one("#card-text", Static)
        width = box.content_region.width or BAR_WIDTH
        text = Text()
        if not report.devices:
            text.append("No NVIDIA GPU: planning for system RAM\n", style="bold yellow")
            if report.note:
                text.append(report.note + "\n", style="dim")
        else:
            driver = report.driver or "n/a"
            cuda = f", CUDA {report.cuda_driver}" if report.cuda_driver else ""
            text.append(f"driver {driver}{cuda}", style="dim")
            if report.source == "replay":
                text.append("  (replayed snapshot)", style="dim")
            text.append("\n")
        split = plan is not None and plan.split
        names = {b.name for b in budgets}
        shares = plan.devices if plan is not None and split else ()
        remote = [s.device.budget for s in shares if s.device.remote]
        for budget in [*budgets, *(b for b in remote if b.name not in names)]:
            share = share_for(plan, budget)
            parts = segments(budget, share)
            if held is not None:
                device = device_name(report, budgets, budget)
                parts = set_segments(budget, [(i, b.get(device, 0)) for i, b in held])
            text.append(f"{budget.name}  {format_bytes(budget.total)}\n", style="bold")
            text.append_text(bar(parts, budget.total, width))
            text.append("\n")
            text.append_text(legend(parts, planned and share is not None))
            text.append("\n")
            if split and share is not None:
                text.append(holds(share) + "\n", style="dim")
        self._update_text(text)
        self._processes(report)

    def _update_text(self, text: Text) -> None:
        """A new reading usually changes figures, not the shape: the screen is laid out
        again only when the wrapped height changes (a layout a second was most of the idle
        CPU, measured by bench/bench_tui_startup.py)."""
        box = self.query_one("#card-text", Static)
        if text == getattr(self, "_text", None):
            return
        width = box.content_region.width or box.size.width
        height = len(text.wrap(self.app.console, width)) if width > 0 else None
        same_shape = height is not None and height == getattr(self, "_height", None)
        self._text, self._height = text, height
        box.update(text, layout=not same_shape)

    def show_growth(self, growth: DesktopGrowth | None, serving: bool = False) -> None:
        """The compositor growth warning, or hide it
        (``serving``: it is about the running engine's plan)."""
        box = self.query_one("#growth", Static)
        if growth is None or not growth.alarming:
            box.display = False
            return
        box.update(growth_text(growth, serving))
        box.display = True

    def show_error(self, error: HomelabError) -> None:
        self._shown = None  # a resize must not draw the last card over the error
        text = Text(f"{error.title}: {error.message}", style="bold red")
        if error.hint:
            text.append(f"\n{error.hint}", style="italic")
        self._update_text(text)

    def _processes(self, report: GpuReport) -> None:
        table = self.query_one("#processes", DataTable)
        rows = [
            (
                str(d.index),
                str(p.pid),
                _short(p.name),
                p.klass,
                format_bytes(p.used_bytes),
            )
            for d in report.devices
            for p in d.processes or ()
        ]
        if rows == getattr(self, "_rows", None):
            return  # nothing changed: keep the table (and the CPU) still
        self._rows = rows
        table.display = bool(rows)
        table.clear()
        for row in rows:
            table.add_row(*row)


RE_PLAN_KEY = "R: re-plan on the card now and restart"
"""What to press, while serving, to plan around the bigger desktop and restart."""
RE_PLAN_PICKED = "enter on the model re-plans on the card now"
"""What to press when the warning is about the picked (not yet running) model's plan."""


def growth_text(growth: DesktopGrowth, serving: bool = False) -> Text:
    """The warning: what grew, by how much since the plan, what is left, what to do
    (``serving``: the plan is the running engine's, so the key re-plans and restarts)."""
    culprit = growth.culprit
    what = "the desktop"
    if culprit is not None:
        name = _short(culprit.name)
        what = f"{name} (pid {culprit.pid})"
        if culprit.grown is not None and culprit.grown > 0:
            what += f" +{format_bytes(culprit.grown)}"
    gone = growth.exhausted
    text = Text("⚠ ", style="bold red" if gone else "bold yellow")
    text.append(
        f"The desktop grew +{format_bytes(growth.grown)} since the plan "
        f"({format_bytes(growth.planned_desktop)} → "
        f"{format_bytes(growth.desktop_peak)}): {what}. "
    )
    if gone:
        text.append("The headroom is gone; the engine is next. ", style="bold red")
    else:
        left = format_bytes(growth.headroom_left)
        text.append(f"{left} of {format_bytes(growth.headroom)} headroom left. ")
    if serving:
        text.append(f"Close it, or re-plan and restart ({RE_PLAN_KEY}).", style="italic")
    else:
        text.append(f"Close it, or re-plan ({RE_PLAN_PICKED}).", style="italic")
    return text


def _short(name: str | None) -> str:
    if not name:
        return "?"
    return name.rsplit("/", 1)[-1][:24]
