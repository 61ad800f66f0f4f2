"""``homelab pull REPO[:QUANT]`` / ``homelab pull REPO/FILE.gguf``: get a model into the HF cache.

stdout gets the result (the model path(s), or one JSON object with ``--json``); stderr
gets the progress bar (speed and ETA, redrawn in place on a terminal, one line per file
otherwise) and notes such as "offline: using cached files". Exit 0 when the model is in
the cache, 130 on Ctrl-C (what was downloaded is kept and the next pull resumes), else
the error's code (``homelab.errors``; 2 for a malformed reference).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import deque
from typing import Any, TextIO

from homelab.cli.common import print_json
from homelab.errors import ExitCode
from homelab.hub.download import PulledModel, PullProgress, pull
from homelab.units import format_bytes

REDRAW_S = 0.1
"""At most this often the bar is redrawn (a terminal, not a log, is the audience)."""
SPEED_WINDOW_S = 5.0
"""Speed is averaged over this many recent seconds."""
BAR_WIDTH = 24


def register(subparsers: Any) -> None:
    """Add ``homelab pull`` to the command tree."""
    parser = subparsers.add_parser(
        "pull",
        help="download a GGUF model from Hugging Face into the shared HF cache",
        description="Download owner/name[:QUANT] (Q4_K_M by default, like llama-server -hf) or "
        "owner/name/FILE.gguf into the Hugging Face cache that `hf download` and "
        "`llama-server -hf` share. Interrupted downloads resume; files are sha256-checked. "
        "Honours HF_HOME, HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN and HF_HUB_OFFLINE.",
    )
    parser.add_argument("ref", metavar="REPO[:QUANT]", help="e.g. bartowski/Qwen3-8B-GGUF:Q4_K_M")
    parser.add_argument(
        "--mmproj",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also get the vision projector (mmproj*.gguf) when the repo has one (default: yes)",
    )
    parser.add_argument(
        "--offline", action="store_true", help="use only the local cache (as HF_HUB_OFFLINE=1)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object with the paths")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run ``homelab pull`` (an error is reported by :func:`homelab.cli.main`, after the bar
    has ended its line)."""
    bar = None if args.quiet else ProgressBar(sys.stderr)
    try:
        model = pull(
            args.ref, progress=bar, offline=True if args.offline else None, mmproj=args.mmproj
        )
    except KeyboardInterrupt:
        if bar:
            bar.finish()
        print(
            "homelab: interrupted; what was downloaded is kept: run the same command to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        if bar:
            bar.finish()
    if model.note:
        print(f"homelab: {model.note}", file=sys.stderr)
    if args.json:
        print_json(result_dict(model))
    else:
        for path in model.paths:
            print(path)
        if model.mmproj:
            print(model.mmproj)
    return int(ExitCode.OK)


def result_dict(model: PulledModel) -> dict[str, Any]:
    """``PulledModel`` as plain JSON values."""
    return {
        "repo": model.repo,
        "revision": model.revision,
        "quant": model.quant,
        "paths": [str(p) for p in model.paths],
        "mmproj": str(model.mmproj) if model.mmproj else None,
        "from_cache": model.from_cache,
        "fetched_bytes": model.fetched,
        "note": model.note,
    }


def format_eta(seconds: float | None) -> str:
    """``"0:42"``, ``"1:02:03"``; ``"--:--"`` when unknown."""
    if seconds is None or math.isnan(seconds) or seconds < 0 or seconds > 99 * 3600:
        return "--:--"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def rate_and_eta(
    samples: deque[tuple[float, int]], remaining: int
) -> tuple[float | None, float | None]:
    """Bytes/s over the samples ``(time, bytes fetched so far)`` and seconds left; None when unknown."""
    if len(samples) < 2:
        return None, None
    (t0, b0), (t1, b1) = samples[0], samples[-1]
    if t1 <= t0 or b1 <= b0:
        return None, None
    rate = (b1 - b0) / (t1 - t0)
    return rate, remaining / rate


class ProgressBar:
    """Draws ``PullProgress`` events on ``stream``: one redrawn line on a terminal, a line per file otherwise."""

    def __init__(self, stream: TextIO, *, clock: Any = time.monotonic) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()
        self.last_draw = 0.0
        self.drawn = False
        self.downloading: set[str] = set()

    def __call__(self, event: PullProgress) -> None:
        now = self.clock()
        self.samples.append((now, event.fetched))
        while len(self.samples) > 2 and now - self.samples[0][0] > SPEED_WINDOW_S:
            self.samples.popleft()
        if event.state == "downloading":
            self.downloading.add(event.filename)
        if not self.tty:
            if event.state == "done":
                word = "downloaded" if event.filename in self.downloading else "already cached"
                self.stream.write(f"{event.filename}: {format_bytes(event.file_total)} {word}\n")
                self.stream.flush()
            return
        if (
            event.state == "downloading"
            and now - self.last_draw < REDRAW_S
            and event.file_done < event.file_total
        ):
            return
        self.last_draw = now
        self.stream.write("\r" + self.line(event) + "\x1b[K")
        self.stream.flush()
        self.drawn = True

    def line(self, event: PullProgress) -> str:
        """The bar for ``event``: file, overall share, bytes, speed, ETA."""
        share = event.done / event.total if event.total else 1.0
        filled = int(BAR_WIDTH * min(share, 1.0))
        bar = "█" * filled + "░" * (BAR_WIDTH - filled)
        rate, eta = rate_and_eta(self.samples, max(event.total - event.done, 0))
        speed = f"{format_bytes(int(rate))}/s" if rate else "--"
        name = event.filename if len(event.filename) <= 40 else "…" + event.filename[-39:]
        count = f"[{event.index}/{event.count}] " if event.count > 1 else ""
        return (
            f"{count}{name} {bar} {share * 100:3.0f}% {format_bytes(event.done)} / "
            f"{format_bytes(event.total)}  {speed}  ETA {format_eta(eta)}"
        )

    def finish(self) -> None:
        """End the redrawn line (before a result or an error is printed)."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
