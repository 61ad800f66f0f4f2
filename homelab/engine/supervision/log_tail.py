"""Follow an engine's log file: complete lines into a bounded tail and to a callback.

The engine writes its log file directly (see ``homelab.engine.supervision.process``), so
homelab reads it like ``tail -f``: a thread polls for new bytes, quickly while
the engine starts (readiness waits on a log line) and slowly once it serves.
:meth:`LogFollower.drain` reads whatever is there right now on the caller's
thread, so the lines an engine printed just before it exited are never missed.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

MAX_LINE_CHARS = 4000
"""Longer lines are cut (a prompt echoed at -lv 4 can be huge); the file keeps them whole."""
_CHUNK = 1 << 16


class LogFollower:
    """Tails one growing file from a background thread.

    Args:
        path: the log file (it may not exist yet).
        on_line: called with each complete line (no newline), in file order, on
            the follower's thread or the thread calling :meth:`drain`; it must be quick.
        tail_lines: how many recent lines :meth:`tail` keeps.
        start_offset: where to start reading; None starts at the current end,
            a negative number that many bytes before the end.
    """

    def __init__(
        self,
        path: Path,
        *,
        on_line: Callable[[str], None] | None = None,
        tail_lines: int = 500,
        start_offset: int | None = 0,
    ) -> None:
        self.path = path
        self.poll_s = 0.02
        self._on_line = on_line
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._partial = b""
        self._offset = self._initial_offset(start_offset)
        self._skip_first = self._offset > 0 and not self._at_line_start(self._offset)

    def _initial_offset(self, start_offset: int | None) -> int:
        try:
            size = self.path.stat().st_size
        except OSError:
            return 0
        if start_offset is None:
            return size
        if start_offset < 0:
            return max(0, size + start_offset)
        return min(start_offset, size)

    def _at_line_start(self, offset: int) -> bool:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(offset - 1)
                return handle.read(1) == b"\n"
        except OSError:
            return True

    def start(self) -> LogFollower:
        """Start the background thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, name="homelab-log-follower", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread after one last read."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self.drain()

    def tail(self, n: int | None = None) -> list[str]:
        """The last ``n`` lines read (all kept lines when None)."""
        with self._lock:
            lines = list(self._tail)
        return lines if n is None else lines[-n:] if n > 0 else []

    def drain(self) -> int:
        """Read and dispatch every complete line written so far; returns how many."""
        with self._lock:
            return self._read_available()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                count = self.drain()
            except Exception:  # a bad callback must not end the follower silently
                logger.exception("log follower callback failed")
                count = 0
            if count == 0:
                self._stop.wait(self.poll_s)

    def _read_available(self) -> int:
        try:
            with open(self.path, "rb") as handle:
                size = handle.seek(0, 2)
                if size < self._offset:  # truncated or replaced: start over
                    self._offset, self._partial = 0, b""
                handle.seek(self._offset)
                data = handle.read(_CHUNK * 16)
        except OSError:
            return 0
        if not data:
            return 0
        self._offset += len(data)
        pieces = (self._partial + data).split(b"\n")
        self._partial = pieces.pop()
        if self._skip_first and pieces:  # started mid-line: the first piece is a fragment
            pieces.pop(0)
            self._skip_first = False
        for raw in pieces:
            line = raw.rstrip(b"\r").decode("utf-8", "replace")[:MAX_LINE_CHARS]
            self._tail.append(line)
            if self._on_line is not None:
                self._on_line(line)
        return len(pieces)
