"""The download bar: the picked model arriving in the HF cache, with speed and ETA."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.hub.download import PullProgress

BAR = 30
WINDOW_S = 5.0
"""Speed is the bytes fetched over the last few seconds (not since the start)."""


class Rate:
    """Bytes per second over a sliding window of (time, fetched) samples."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, fetched: int) -> float | None:
        """Record ``fetched`` bytes so far at ``at``; the speed, or None until two samples."""
        self._samples.append((at, fetched))
        while len(self._samples) > 2 and at - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        (t0, f0), (t1, f1) = self._samples[0], self._samples[-1]
        if t1 <= t0:
            return None
        return (f1 - f0) / (t1 - t0)


def progress_text(name: str, done: int, total: int, speed: float | None) -> Text:
    """``name ▕████░░░░▏ 42 %  12.0 MiB of 28.5 MiB  3.1 MiB/s  ETA 6 s``."""
    share = done / total if total > 0 else 0.0
    filled = round(BAR * share)
    text = Text(f"{name} ")
    text.append("█" * filled, style="green")
    text.append("░" * (BAR - filled), style="dim")
    text.append(f" {share * 100:.0f} %  {format_bytes(done)} of {format_bytes(total)}")
    if speed is not None and speed > 0:
        text.append(f"  {format_bytes(int(speed))}/s  ETA {_eta((total - done) / speed)}")
    text.append("  (escape cancels)", style="dim italic")
    return text


def _eta(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60} s"


class DownloadBar(Static):
    """One line: the bar while bytes arrive, then what came of it (done, cancelled, failed)."""

    DEFAULT_CSS = "DownloadBar { height: auto; }"

    def on_mount(self) -> None:
        self.rate = Rate()
        self.progress: PullProgress | None = None
        """The last progress shown, None before the first."""

    def start(self, words: str) -> None:
        """A new download: its first line; the speed starts afresh."""
        self.rate = Rate()
        self.progress = None
        self.show_line(words)

    def show_progress(self, progress: PullProgress, at: float | None = None) -> None:
        self.progress = progress
        speed = self.rate.add(time.monotonic() if at is None else at, progress.fetched)
        self.update(progress_text(progress.filename, progress.done, progress.total, speed))

    def show_cancelled(self, kept: int, total: int) -> None:
        self.show_line(cancelled_text(kept, total), "yellow")

    def show_done(self, path: Path, *, verified: bool) -> None:
        how = "downloaded, checksum verified" if verified else "already in the cache"
        self.show_line(f"{how}: {path}", "green")

    def show_line(self, words: str, style: str = "") -> None:
        self.update(Text(words, style=style))


def cancelled_text(kept: int, total: int) -> str:
    """``cancelled, 1,048,576 of 9,961,472 bytes kept (1.0 MiB of 9.5 MiB): d resumes``."""
    return (
        f"cancelled, {kept:,} of {total:,} bytes kept "
        f"({format_bytes(kept)} of {format_bytes(total)}): d resumes"
    )
