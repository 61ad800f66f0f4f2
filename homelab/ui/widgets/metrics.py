"""The live metrics panel while an engine serves: speeds, requests, KV per slot, cache reuse.

Rates are the engine status poller's (deltas of llama-server's counters); the sparklines
keep the last :data:`HISTORY` readings (about one a second) of the prompt and generation
speed of each window (0 when a window generated nothing). The alarm line is the domain's
prompt-cache rule (``homelab.engine.llamacpp.reuse_alarm``), shown until a later prompt
reuses its cache well.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Sparkline, Static

if TYPE_CHECKING:
    from homelab.engine.llamacpp.client import LiveStatus
    from homelab.engine.llamacpp.reuse_alarm import Reprocessed

HISTORY = 180
"""Readings the sparklines keep (three minutes at one a second)."""


def tps(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def window_rates(status: LiveStatus) -> tuple[float, float]:
    """(prompt, generation) tokens/s of the status's window; 0 for a window without any."""
    window = status.window
    if window is None:
        return 0.0, 0.0
    return window.prompt_tps or 0.0, window.gen_tps or 0.0


LISTED_SLOTS = 4
"""Up to this many slots get a line each; more get a total and one fill glyph per slot."""

FILL_GLYPHS = " ▁▂▃▄▅▆▇█"


def fill_glyph(held: int, n_ctx: int) -> str:
    """One character for how full a slot's KV is: blank empty, a full block full."""
    if n_ctx <= 0:
        return "?"
    step = round(min(held / n_ctx, 1.0) * (len(FILL_GLYPHS) - 1))
    if held and step == 0:
        step = 1  # a slot holding anything is never drawn empty
    return FILL_GLYPHS[step]


def kv_lines(text: Text, slots: tuple[tuple[int, int, int], ...]) -> None:
    """KV held per slot: a line each for a few slots; for many (an agent plan's 32) a total,
    the fullest slot and a row of fill glyphs, so the panel keeps its height."""
    if len(slots) <= LISTED_SLOTS:
        for slot, held, n_ctx in slots:
            share = f" ({held / n_ctx:.0%})" if n_ctx else ""
            text.append(f"KV slot {slot}: {held:,}/{n_ctx:,} cells{share}\n")
        return
    held_all = sum(held for _, held, _ in slots)
    cells_all = sum(n_ctx for _, _, n_ctx in slots)
    share = f" ({held_all / cells_all:.0%})" if cells_all else ""
    text.append(f"KV {held_all:,}/{cells_all:,} cells{share} over {len(slots)} slots\n")
    slot, held, n_ctx = max(slots, key=lambda s: (s[1] / s[2]) if s[2] else 0.0)
    if held:
        text.append(f"fullest: slot {slot}, {held:,}/{n_ctx:,} cells\n")
    glyphs = "".join(fill_glyph(held, n_ctx) for _, held, n_ctx in slots)
    text.append("slots ", style="dim")
    text.append(f"[{glyphs}]\n", style="bold")


class MetricsPanel(Vertical):
    """Hidden until ``show`` gets a status; ``clear`` hides it again (engine gone)."""

    DEFAULT_CSS = """
    MetricsPanel {
        height: auto; max-height: 50%; overflow-y: auto;
        border: round $primary; padding: 0 1; display: none;
    }
    MetricsPanel #metrics-text { height: auto; }
    MetricsPanel #metrics-alarm { height: auto; color: $error; text-style: bold; display: none; }
    MetricsPanel Sparkline { height: 1; margin-bottom: 0; }
    MetricsPanel .spark-label { height: 1; color: $text-muted; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="metrics-text")
        yield Static("prompt tok/s", classes="spark-label", id="prompt-label")
        yield Sparkline([], id="prompt-spark")
        yield Static("gen tok/s", classes="spark-label", id="gen-label")
        yield Sparkline([], id="gen-spark")
        yield Static("", id="metrics-alarm")

    def on_mount(self) -> None:
        self.border_title = "live"
        self.prompt_history: deque[float] = deque(maxlen=HISTORY)
        self.gen_history: deque[float] = deque(maxlen=HISTORY)
        self.last: LiveStatus | None = None

    def clear(self) -> None:
        self.prompt_history.clear()
        self.gen_history.clear()
        self.last = None
        self.query_one("#metrics-alarm", Static).display = False
        self.display = False

    def show(
        self, status: LiveStatus, alarm: Reprocessed | None, gate: list[str] | None = None
    ) -> None:
        """Render one status; ``alarm`` is a ``Reprocessed`` (or None: keep or clear the last);
        ``gate``: the admission gate's lines, when one is in front of the engine."""
        self.display = True
        self.last = status
        prompt, gen = window_rates(status)
        self.prompt_history.append(prompt)
        self.gen_history.append(gen)
        self.query_one("#prompt-spark", Sparkline).data = list(self.prompt_history)
        self.query_one("#gen-spark", Sparkline).data = list(self.gen_history)
        peak_p, peak_g = max(self.prompt_history), max(self.gen_history)
        self.query_one("#prompt-label", Static).update(f"prompt tok/s (peak {tps(peak_p)})")
        self.query_one("#gen-label", Static).update(f"gen tok/s (peak {tps(peak_g)})")
        self.query_one("#metrics-text", Static).update(self._text(status, gate or ()))
        box = self.query_one("#metrics-alarm", Static)
        if alarm is not None:
            box.update(
                f"⚠ a turn re-processed {alarm.share:.0%} of its prompt "
                f"({alarm.processed} tokens, {alarm.cached} from the cache) although the "
                f"cache held {alarm.held_before}: the client changes the start of its prompt."
            )
            box.display = True
        elif status.window is not None and status.window.cache_reuse is not None:
            box.display = False  # a later prompt: the alarm was about an earlier turn

    def _text(self, status: LiveStatus, gate: Sequence[str] = ()) -> Text:
        text = Text()
        if not status.health.ready:
            text.append(f"{status.health.state.value}: {status.health.detail}\n", style="yellow")
        text.append("prompt ", style="dim")
        text.append(f"{tps(status.prompt_tps)} tok/s", style="bold")
        text.append("   gen ", style="dim")
        text.append(f"{tps(status.gen_tps)} tok/s\n", style="bold")
        processing, deferred = status.processing, status.deferred
        text.append(
            f"requests {'?' if processing is None else processing} running · "
            f"{'?' if deferred is None else deferred} deferred\n"
        )
        kv_lines(text, status.kv_per_slot or ())
        reuse = status.cache_reuse
        if reuse is not None:
            cached, processed = reuse
            total = cached + processed
            text.append(
                f"cache reuse (latest prompt): {cached / total:.0%} of {total} tokens"
                if total
                else "cache reuse: –"
            )
        else:
            text.append("cache reuse: no prompt yet", style="dim")
        for line in gate:
            text.append(f"\n{line}", style="bold yellow" if line.startswith("⚠") else "")
        for note in status.notes:
            text.append(f"\n{note}", style="dim")
        return text
