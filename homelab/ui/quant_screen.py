"""The download chooser: which quant of a preset's repo ``d`` downloads.

``d`` on a preset (★ row) opens it: every GGUF quant of the repo, each with its size and
its verdict on this card for the row's workload, ranked and worded as ``homelab quants
REPO`` does (both call :func:`homelab.serve.quant_choice.quants_on_card`; this module only
lays the answer out). The best quant is marked ``*`` and preselected (without one, the
preset's own quant is); enter downloads the highlighted quant, escape closes.

Listing the quants asks the Hub (a listing, then each quant's header): it runs in a thread
worker while the chooser says ``reading the quants…``. Offline (the app's offline line is
up), or when the Hub's answer is an error, the chooser says why and offers the preset's
own quant, the one ``d`` downloaded before there was a chooser.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from homelab.errors import HomelabError
from homelab.ui.widgets.plan import VERDICT_STYLE
from homelab.units import format_bytes, format_int

if TYPE_CHECKING:
    from homelab.hub.presets import Preset
    from homelab.serve.quant_choice import QuantsOnCard
    from homelab.serve.quant_fit import QuantFit

READING = "reading the quants…"
UNKNOWN_SIZE = "unknown"
"""A quant whose size the listing does not say (never shown as 0)."""
BEST_MARK = "*"
HEADER = ("", "QUANT", "SIZE", "FIT", "FULL SLOTS", "TOKENS/SLOT", "PLACEMENT")


@dataclass(frozen=True, slots=True)
class QuantRow:
    """One line of the chooser: the reference it downloads and its cells."""

    ref: str
    cells: tuple[str, ...]
    verdict: str


class QuantScreen(ModalScreen[str | None]):
    """See the module docstring; dismissed with the reference to download, or None."""

    DEFAULT_CSS = """
    QuantScreen { align: center middle; }
    QuantScreen > Vertical {
        width: 110; height: auto; max-height: 90%; border: thick $primary;
        background: $surface; padding: 1 2;
    }
    QuantScreen #quants { height: auto; max-height: 20; }
    QuantScreen #quants-status, QuantScreen #quants-detail { margin-top: 1; }
    """
    BINDINGS = [Binding("escape", "close", "close")]

    @dataclass
    class Read(Message, bubble=False):
        """The worker's answer: the quants judged, or why there are none."""

        result: QuantsOnCard | HomelabError

    def __init__(
        self, preset: Preset, load: Callable[[], QuantsOnCard], offline: str | None
    ) -> None:
        """``load`` lists and judges the quants (it blocks: run in a worker); ``offline``:
        why the Hub cannot be reached (then ``load`` is not called)."""
        super().__init__()
        self.preset = preset
        self._load = load
        self._offline = offline
        self.rows: list[QuantRow] = []
        """The lines shown, in order (the preset's own quant alone after a failure)."""
        self.judged: QuantsOnCard | None = None

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                Text(f"Download {self.preset.name} ({self.preset.repo}): which quant?", "bold")
            )
            yield Static(Text(READING, style="dim italic"), id="quants-status")
            yield Static("", id="quants-header")
            yield OptionList(id="quants")
            yield Static("", id="quants-detail")
            yield Static(Text("enter downloads the highlighted quant · escape closes", "dim"))

    def on_mount(self) -> None:
        self.query_one("#quants", OptionList).focus()
        if self._offline is not None:
            self._fall_back(
                f"The Hub cannot be reached ({self._offline}): its quants cannot be listed."
            )
        else:
            self._read()

    @work(thread=True, exit_on_error=False)
    def _read(self) -> None:
        try:
            result: QuantsOnCard | HomelabError = self._load()
        except HomelabError as error:
            result = error
        self.post_message(self.Read(result))

    def on_quant_screen_read(self, message: Read) -> None:
        result = message.result
        if isinstance(result, HomelabError):
            why = f"{result.title}: {result.message}" + (f" ({result.hint})" if result.hint else "")
            self._fall_back(why)
        elif result.listing.offline_reason is not None:
            self._fall_back(f"{result.listing.offline_reason}: the Hub's quants cannot be listed.")
        else:
            self._show(result)

    def _show(self, judged: QuantsOnCard) -> None:
        from homelab.serve.quant_choice import download_ref, verdict_words

        self.judged = judged
        best = judged.best
        moe = any(f.fit.plan and any(f.fit.plan.weights.experts_per_block) for f in judged.fits)
        self.rows = [
            QuantRow(
                download_ref(judged.listing, quant),
                _cells(quant, quant is best, verdict_words(quant), moe),
                quant.fit.verdict,
            )
            for quant in judged.fits
        ]
        header = HEADER if moe else HEADER[:-1]
        widths = [
            max(len(c[i]) for c in (header, *(r.cells for r in self.rows)))
            for i in range(len(header))
        ]
        self.query_one("#quants-header", Static).update(Text(_line(header, widths), "bold"))
        options = self.query_one("#quants", OptionList)
        options.clear_options()
        options.add_options(
            Option(Text(_line(r.cells, widths), VERDICT_STYLE.get(r.verdict, "")), id=r.ref)
            for r in self.rows
        )
        chosen = best if best is not None else self._own_quant(judged.fits)
        options.highlighted = judged.fits.index(chosen) if chosen is not None else 0
        status = f"{len(judged.fits)} quant(s) on {judged.device}, workload "
        status += f"{judged.workload.describe()}. " + ("Best: " if best else "") + judged.why
        self.query_one("#quants-status", Static).update(status)

    def _own_quant(self, fits: list[QuantFit]) -> QuantFit | None:
        wanted = self.preset.quant.lower()
        return next((f for f in fits if (f.choice.tag or "").lower() == wanted), None)

    def _fall_back(self, why: str) -> None:
        """Say why the quants are not listed; offer the preset's own quant."""
        self.rows = [QuantRow(self.preset.ref, (self.preset.quant, "the preset's own quant"), "")]
        text = Text(why, style="yellow")
        text.append("\nThe preset's own quant is offered: enter downloads it.", style="italic")
        self.query_one("#quants-status", Static).update(text)
        options = self.query_one("#quants", OptionList)
        options.clear_options()
        options.add_option(
            Option(f"{self.preset.quant}  (the preset's own quant)", id=self.preset.ref)
        )
        options.highlighted = 0

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        """The highlighted quant's reason, when it has one (why it does not fit, is unknown,
        or is not ranked)."""
        detail = ""
        if self.judged is not None and event.option_index < len(self.judged.fits):
            fit = self.judged.fits[event.option_index].fit
            if fit.reason and fit.verdict in ("unknown", "does_not_fit"):
                detail = fit.explanation or fit.reason
            elif fit.plan is not None and fit.plan.warnings:
                detail = fit.plan.warnings[0]
        self.query_one("#quants-detail", Static).update(Text(detail, "italic"))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_close(self) -> None:
        self.dismiss(None)


def _cells(quant: QuantFit, best: bool, verdict: str, moe: bool) -> tuple[str, ...]:
    """The quant's cells, as the columns of ``homelab quants`` fill them."""
    from homelab.serve.quant_rank import rung_of

    fit, plan = quant.fit, quant.fit.plan
    parts = len(quant.choice.files)
    cells: tuple[str, ...] = (
        BEST_MARK if best else "",
        quant.label + (f" ({parts} parts)" if parts > 1 else ""),
        UNKNOWN_SIZE if quant.size is None else format_bytes(quant.size),
        verdict,
        str(fit.full_slots) if plan else "-",
        format_int(plan.candidate.allocation.ctx_per_slot) if plan else "-",
    )
    return cells + ((rung_of(plan).words if plan else "-",) if moe else ())


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
