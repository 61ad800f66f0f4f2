"""What ``homelab serve`` prints while it runs (the live status line, crash and restart news),
and the signal handling that makes SIGTERM/SIGHUP a clean stop like Ctrl-C."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.engine.supervision.states import Transition

STATUS_EVERY_S = 2.0
"""How often the live status line is refreshed on a terminal."""
STATUS_EVERY_NOT_TTY_S = 60.0
"""...and how often a status line is printed when stdout is a file or pipe."""


def watch_status(supervisor, *, kv_unified: bool) -> None:
    """The live status line until the supervisor ends (Ctrl-C raises out of here).

    Renders the engine status poller's events: it polls while the engine is ready, at
    the line's pace (every ``STATUS_EVERY_S`` on a terminal, ``STATUS_EVERY_NOT_TTY_S``
    otherwise), and each status it publishes becomes the line.
    """
    from homelab.engine.llamacpp.client import status_line
    from homelab.engine.llamacpp.status_poller import StatusPoller
    from homelab.engine.supervision.states import State

    line = StatusLine.shared()
    every = STATUS_EVERY_S if line.tty else STATUS_EVERY_NOT_TTY_S

    def url() -> str | None:
        return supervisor.url if supervisor.state is State.READY else None

    def show(status) -> None:
        if supervisor.state is State.READY:
            line.show(status_line(status))

    poller = StatusPoller(
        url,
        kv_unified=kv_unified,
        interval_s=every,
        timeout_s=min(every, 5.0),
        api_key=supervisor.spec.api_key,  # the engine's own key (its gate's too)
    )
    poller.subscribe(show)
    try:
        poller.start()
        while not supervisor.wait_stopped(1.0):
            pass
    finally:
        poller.stop()


class Narrator:
    """Says crashes that lead to a restart, the restart, and readiness after it, in plain lines
    (the describer's words for each transition).

    A crash that ends the retries is not said here: the command's error says it.
    """

    def __init__(self) -> None:
        self._crash: Transition | None = None

    def healing(self) -> None:
        """A heal said the crash (out of memory) and what changes: no stale crash line."""
        self._crash = None

    def __call__(self, transition: Transition) -> None:
        from homelab.engine.supervision.states import State

        if transition.state is State.CRASHED:
            self._crash = transition if transition.failure is not None else None
            return
        if transition.state is State.RESTARTING and self._crash is not None:
            _say(self._crash)
        if transition.state is State.RESTARTING or (
            transition.state is State.READY and transition.attempt > 1
        ):
            _say(transition)


def _say(transition: Transition) -> None:
    """The describer's words for ``transition``; a failure's on stderr."""
    from homelab.serve.describe import Severity, describe
    from homelab.serve.events import EngineChanged

    said = describe(EngineChanged(transition))
    StatusLine.shared().say(said.line or "", err=said.severity is Severity.ERROR)


class StatusLine:
    """One line rewritten in place on a terminal; plain lines otherwise."""

    _instance: StatusLine | None = None

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self._open = False

    @classmethod
    def shared(cls) -> StatusLine:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def show(self, text: str) -> None:
        if self.tty:
            sys.stdout.write("\r\x1b[K" + text)
            self._open = True
        else:
            sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def say(self, text: str, *, err: bool = False) -> None:
        self.close()
        print(text, file=sys.stderr if err else sys.stdout, flush=True)

    def close(self) -> None:
        if self._open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._open = False


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop ``serve`` cleanly, like Ctrl-C."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def ignore_interrupts() -> Iterator[None]:
    """While stopping, a second Ctrl-C must not cut the stop short (it is bounded anyway)."""
    previous = {
        s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
