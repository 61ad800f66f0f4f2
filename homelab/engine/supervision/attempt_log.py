"""One supervisor session's engine log, split into attempts.

All starts of one supervised engine append to the same file (so a person reads
one story); before each spawn the supervisor writes a marker line::

    ---- homelab 2026-01-31T12:00:00.000+01:00 attempt 2: /path/llama-server -m ...

While the file streams in (``homelab.engine.supervision.log_tail``), this keeps the lines of
the attempt now running (to explain its failure) and notes when that attempt
logged the engine's "serving" line (half of readiness). A line of an earlier
attempt read late never counts for the current one.
"""

from __future__ import annotations

import re
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from homelab.engine.supervision.log_tail import LogFollower

_MARKER = re.compile(r"^---- homelab \S+ attempt (\d+):")
ATTEMPT_LINES = 2000
LOGS_KEPT = 20
"""Older session logs in the logs folder are removed."""
STARTING_POLL_S = 0.02
SERVING_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of the engine's log, as live subscribers get it (markers are not sent)."""

    text: str
    """The line, without its newline (cut at ``log_tail.MAX_LINE_CHARS``)."""
    attempt: int
    """The attempt that wrote it (the marker before it; 0 before any marker)."""
    at: float
    """Wall-clock time homelab read it (seconds since the epoch)."""


def marker_line(attempt: int, argv: Sequence[str]) -> str:
    """The line written to the log before attempt ``attempt`` spawns."""
    stamp = datetime.now().astimezone().isoformat(timespec="milliseconds")
    return f"---- homelab {stamp} attempt {attempt}: {shlex.join(argv)}"


def new_log_path(folder: Path, engine: str) -> Path:
    """A fresh log file name in ``folder``; prunes all but the newest LOGS_KEPT logs."""
    folder.mkdir(parents=True, exist_ok=True)
    old = sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)
    for path in old[: max(len(old) - LOGS_KEPT + 1, 0)]:
        path.unlink(missing_ok=True)
    return folder / f"{engine}-{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}.log"


class AttemptLog:
    """Follows ``path``; tracks the current attempt's lines and its serving line.

    Args:
        path: the session log.
        is_serving: recognises the engine's "I am serving" line.
        on_serving: called (on the follower's thread) when the current attempt logs it.
        adopt: start near the end of an existing log (an engine another homelab started).
        on_line: called with each engine line as a :class:`LogLine` (on the follower's
            thread; it must not block: hand it to an ``EventHub``).
    """

    def __init__(
        self,
        path: Path,
        is_serving: Callable[[str], bool],
        on_serving: Callable[[], None],
        *,
        adopt: bool = False,
        on_line: Callable[[LogLine], None] | None = None,
    ) -> None:
        self.path = path
        self._publish = on_line
        self._is_serving = is_serving
        self._on_serving = on_serving
        self._lock = threading.Lock()
        self._current = 0
        self._line_attempt = 0
        self._serving_attempt = -1
        self._lines: deque[str] = deque(maxlen=ATTEMPT_LINES)
        self._follower = LogFollower(
            path, on_line=self._on_line, start_offset=-(1 << 20) if adopt else 0
        )
        if adopt:  # read what is there now, so the latest marker sets the attempt
            self._follower.drain()
            with self._lock:
                self._current = self._line_attempt
                if any(is_serving(line) for line in self._lines):
                    self._serving_attempt = self._current

    def start(self) -> AttemptLog:
        """Start following."""
        self._follower.start()
        return self

    def stop(self) -> None:
        """Stop following (after a last read)."""
        self._follower.stop()

    @property
    def attempt(self) -> int:
        """The attempt whose lines count now."""
        with self._lock:
            return self._current

    def begin(self, attempt: int) -> None:
        """Lines after marker ``attempt`` are the current ones from now on."""
        with self._lock:
            self._current = attempt
        self._follower.poll_s = STARTING_POLL_S

    def mark_serving(self) -> None:
        """Count the current attempt as serving: (an adopted, ready engine)."""
        with self._lock:
            self._serving_attempt = self._current

    def serving(self) -> bool:
        """True once the current attempt logged its serving line."""
        with self._lock:
            return self._serving_attempt == self._current

    def settle(self) -> None:
        """The engine serves: poll the file slowly."""
        self._follower.poll_s = SERVING_POLL_S

    def lines(self) -> list[str]:
        """The current attempt's lines, read up to now (the file is drained first)."""
        self._follower.drain()
        with self._lock:
            return list(self._lines) if self._line_attempt == self._current else []

    def tail(self, n: int) -> list[str]:
        """The last ``n`` lines of the log, whatever the attempt."""
        return self._follower.tail(n)

    def _on_line(self, line: str) -> None:
        marker = _MARKER.match(line)
        fire = False
        with self._lock:
            if marker is not None:
                self._line_attempt = int(marker.group(1))
                self._lines.clear()
                return
            self._lines.append(line)
            attempt = self._line_attempt
            if (
                self._line_attempt == self._current
                and self._serving_attempt != self._current
                and self._is_serving(line)
            ):
                self._serving_attempt = self._current
                fire = True
        if self._publish is not None:
            self._publish(LogLine(line, attempt, time.time()))
        if fire:
            self._on_serving()
