"""The gate's log: the detached gate's file, rotated at a size bound; the foreground
gate's lines in the serve's terminal; in both, warnings and errors rate-limited, each kind
to a few a minute, one line each (a traceback only with the first of a kind in a window).

Why: a gate people expose to their LAN meets floods — a thousand idle sockets against the
open-file limit, a client sending garbage in a loop — and each refused connection must not
become a log line (or a 30-line traceback) each: an adversarial run wrote ~1M "Too many
open files" tracebacks, ~4 MB/s into ``state/logs``, a disk-filler. Here the log file
rolls over at :data:`LOG_MAX_BYTES` keeping :data:`LOG_BACKUPS` old ones, and a warning or
error of one kind (its logger and message template) passes :data:`PER_WINDOW` times a
:data:`WINDOW_S` window; the first of a window that passes after some were held back says
how many, and only the first of a kind in a window keeps its traceback. The request lines
(INFO, one per request: :mod:`homelab.gate.access_log`) are never held back: the size
bound is what keeps them from filling the disk.

The gate's own errors and aiohttp's (its server's, under ``homelab.gate.server``; its
event loop's, under ``homelab.gate.loop``: :mod:`homelab.gate.runner`) all go through
:class:`RateLimit`: a gate on a thread of ``homelab serve`` printed aiohttp's traceback
for every request it could not parse, ~10 lines each, into the person's terminal.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from logging.handlers import RotatingFileHandler
from pathlib import Path

from homelab.units import MiB

LOG_MAX_BYTES = 16 * MiB
LOG_BACKUPS = 2
"""Old logs kept beside the current one (``….log.1``, ``….log.2``)."""
WINDOW_S = 60.0
PER_WINDOW = 10
"""Warnings or errors of one kind logged per window."""


class RateLimit(logging.Filter):
    """Passes every record under WARNING; of the others, :data:`PER_WINDOW` of each kind
    per :data:`WINDOW_S` (see the module docstring)."""

    def __init__(
        self,
        per_window: int = PER_WINDOW,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.per_window, self.window_s, self.clock = per_window, window_s, clock
        self._kinds: dict[tuple[str, str], list[float | int]] = {}
        """kind → [window start, passed in it, held back since the last one passed]."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = (record.name, str(record.msg))
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is None or now - seen[0] >= self.window_s:
            held = 0 if seen is None else int(seen[2])
            seen = self._kinds[kind] = [now, 0, held]
            if len(self._kinds) > 1000:  # kinds made of varying text: keep the book small
                self._kinds = {kind: seen}
        if seen[1] >= self.per_window:
            seen[2] = int(seen[2]) + 1
            return False
        if seen[1] > 0:
            record.exc_info, record.exc_text = None, None  # one traceback a window
        if seen[2]:
            record.msg = f"{record.msg} [{seen[2]} more like this were not logged]"
            seen[2] = 0
        seen[1] = int(seen[1]) + 1
        return True


GATE_LOGGERS = ("homelab.gate", "aiohttp")
"""What the terminal is told of: the gate's own loggers and its library's."""
TERMINAL_FORMAT = "homelab gate %(levelname)s: %(message)s"


class _Terminal(logging.StreamHandler):
    """Writes to the ``sys.stderr`` of the moment (a TUI redirects it while it runs)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def log_to_terminal() -> logging.Handler:
    """Send the gate's warnings and errors to stderr, one line each, rate-limited (the
    foreground gate, on a thread of ``homelab serve``). Idempotent; returns the handler."""
    for handler in logging.getLogger(GATE_LOGGERS[0]).handlers:
        if isinstance(handler, _Terminal):
            return handler
    handler = _Terminal()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    handler.addFilter(RateLimit())
    for name in GATE_LOGGERS:
        logging.getLogger(name).addHandler(handler)
    return handler


def log_to_file(
    path: Path, *, max_bytes: int = LOG_MAX_BYTES, backups: int = LOG_BACKUPS
) -> logging.Handler:
    """Send homelab's INFO lines and every library's warnings and errors to ``path``,
    rotated and rate-limited; returns the handler (on the root logger)."""
    handler = RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # aiohttp's and asyncio's own chatter stays out
    logging.getLogger("homelab").setLevel(logging.INFO)
    return handler
