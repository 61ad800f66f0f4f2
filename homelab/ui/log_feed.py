"""The engine's log for the server panel, as the supervisor pushes it (no polling).

A :class:`LogFeed` subscribes to the supervisor's live events (its transitions and every
engine log line, on a delivery thread of the supervisor's event hub), then seeds itself
with the log's tail: the lines read before the subscription (an engine that started a
moment ago, or one adopted from an earlier homelab). Pushed lines read before the seed
was taken are in the seed already and are skipped (each line carries the wall-clock time
it was read). Transitions become one line each (the describer's headline, ``── crashed: …``),
so the log reads as one story and the search finds them too.

The delivery thread only appends to a bounded buffer and, when the app has not been told
yet, posts one :class:`LogArrived`; the app takes everything buffered at once, so a burst
of lines (llama-server at ``-lv 4``) costs one message, not one per line.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual.message import Message

from homelab.serve.describe import describe
from homelab.serve.events import EngineChanged

if TYPE_CHECKING:
    from homelab.engine.supervision.supervisor import Supervisor

LOG_KEPT = 500
"""Lines the feed (and the panel) keep; older ones are dropped."""


@dataclass
class LogArrived(Message, bubble=False):
    """New lines wait in ``feed`` (take them with :meth:`LogFeed.take`)."""

    feed: LogFeed


class LogFeed:
    """One supervisor's pushed log lines (see the module docstring)."""

    def __init__(
        self, supervisor: Supervisor, post: Callable[[Message], None], keep: int = LOG_KEPT
    ) -> None:
        self.supervisor = supervisor
        self._post = post
        self._keep = keep
        self._lock = threading.Lock()
        self._pending: deque[str] = deque(maxlen=keep)
        self._told = False
        self._since: float | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._closed = False
        self._seeded = False

    def start(self) -> LogFeed:
        """Subscribe, then seed with the tail (called on a worker thread: it may block)."""
        unsubscribe = self.supervisor.subscribe(self._arrived, log_lines=True)
        with self._lock:
            closed = self._closed
            if not closed:
                self._unsubscribe = unsubscribe
        if closed:  # closed while it started
            unsubscribe()
            return self
        self._seed()
        self._tell()
        return self

    def _seed(self) -> None:
        """Take the log's tail as the first lines. An engine whose first attempt has not
        begun yet has no log: the first pushed line seeds it then (the tail holds that
        line and the attempt's marker line before it, which is never pushed)."""
        with self._lock:
            self._since = time.time()  # pushed lines read before this are in the seed
        seed = self.supervisor.tail(self._keep)
        with self._lock:
            if self._closed:
                return
            self._seeded = bool(seed)
            early = list(self._pending)
            self._pending.clear()
            self._pending.extend(seed)
            self._pending.extend(early[_overlap(seed, early) :])

    def _arrived(self, event: Any) -> None:
        """On the delivery thread: buffer the line (or the transition's line); only the first
        line of a log that began after :meth:`start` reads the file (once)."""
        from homelab.engine.supervision.attempt_log import LogLine

        if isinstance(event, LogLine) and not self._seeded and self._since is not None:
            self._seed()  # the log began after start(): its tail has this line already
            self._tell()
            return
        with self._lock:
            if self._closed:
                return
            if isinstance(event, LogLine):
                if self._since is None or event.at <= self._since:
                    return  # read before the seed was taken: the seed has it
                self._pending.append(event.text)
            else:
                self._pending.append(transition_line(event))
        self._tell()

    def _tell(self) -> None:
        with self._lock:
            if self._told or not self._pending:
                return
            self._told = True
        self._post(LogArrived(self))

    def take(self) -> list[str]:
        """Everything buffered since the last take (on the app's thread)."""
        with self._lock:
            lines = list(self._pending)
            self._pending.clear()
            self._told = False
        return lines

    def close(self) -> None:
        """Unsubscribe (idempotent); lines still queued are dropped."""
        with self._lock:
            self._closed = True
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            self._pending.clear()
        if unsubscribe is not None:
            unsubscribe()


def transition_line(transition: Any) -> str:
    """``── restart in 1.0 s (1 crash(es) in the last 600 s)``: the describer's headline for
    the supervisor's change, marked off from the engine's own lines."""
    return f"── {describe(EngineChanged(transition)).headline}"


def _overlap(seed: list[str], early: list[str]) -> int:
    """How many of ``early``'s first lines end ``seed`` too (read in the instant between)."""
    for k in range(min(len(seed), len(early)), 0, -1):
        if seed[-k:] == early[:k]:
            return k
    return 0
