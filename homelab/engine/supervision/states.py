"""The supervisor's vocabulary: states, transitions, what to run, when to restart.

Kept apart from :mod:`homelab.engine.supervision.supervisor` and its run loop
(:mod:`homelab.engine.supervision.run_loop`) so a UI can import these values without the
machinery.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.failure import EngineFailure
from homelab.engine.supervision.ports import LOOPBACK

logger = logging.getLogger(__name__)


class State(StrEnum):
    """Where the engine is in its life; :data:`TRANSITIONS` says what may follow what."""

    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    CRASHED = "crashed"
    RESTARTING = "restarting"
    STOPPING = "stopping"


_STOP = frozenset({State.STOPPING, State.STOPPED})

TRANSITIONS: Mapping[State, frozenset[State]] = MappingProxyType(
    {
        # spawned or adopted; a first spawn that failed (STOPPED again, with its failure);
        # the supervisor failed (STOPPING)
        State.STOPPED: frozenset({State.STARTING, State.STOPPED, State.STOPPING}),
        # ready, crashed, an asked-for restart, a stop (asked, timed out, from outside)
        State.STARTING: frozenset({State.READY, State.CRASHED, State.RESTARTING, *_STOP}),
        State.READY: frozenset({State.CRASHED, State.RESTARTING, *_STOP}),
        # the restart (or a heal's new spec); gave up (STOPPED); the supervisor failed
        State.CRASHED: frozenset({State.RESTARTING, *_STOP}),
        # the next attempt; its spawn failed (CRASHED); a stop during the backoff
        State.RESTARTING: frozenset({State.STARTING, State.CRASHED, *_STOP}),
        State.STOPPING: frozenset({State.STOPPED}),
    }
)
"""Every state change the run loop makes: the state -> the states that may follow it.

``stopped -> starting -> ready -> (crashed -> restarting -> starting ...) -> stopping -> stopped``
is the usual life; a stop from outside (``homelab stop``, ``--replace``) and giving up after
a crash go straight to STOPPED; a run loop that fails goes to STOPPING from where it was and
stops the engine. :meth:`StateMachine.move` refuses anything else.
"""


class TransitionError(RuntimeError):
    """A state change that is not in :data:`TRANSITIONS`: a bug in the supervisor."""


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change, as subscribers and :attr:`Supervisor.events` see it."""

    state: State
    previous: State
    at: float
    """Wall-clock time (seconds since the epoch)."""
    monotonic: float
    reason: str
    attempt: int
    """Which start this belongs to (1 = the first spawn; restarts count up)."""
    pid: int | None
    url: str | None
    failure: EngineFailure | None = None
    """Why, after a crash or a stop that was not asked for."""


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """What to run and how."""

    argv: tuple[str, ...]
    """The engine's command line (``--host``/``--port`` are set by the supervisor)."""
    model: str
    port: int
    """Where it listens (the engine kind's default, or the one a person chose)."""
    host: str = LOOPBACK
    port_pinned: bool = False
    """True when the user chose the port: a taken port is an error, not a move."""
    detached: bool = False
    """Keep running after homelab exits (no parent-death signal)."""
    start_timeout_s: float = 600.0
    """Generous: a 70B model read from a spinning disk takes minutes."""
    stop_grace_s: float = 20.0
    facts: PlanFacts | None = None
    """What the plan gave it (written into the state file's record)."""
    memory_limit: int | None = None
    """Cap on the engine's address space in bytes (``RLIMIT_AS``); None: no cap."""
    api_key: str | None = field(default=None, repr=False)
    """The engine's own key (:mod:`homelab.engine.engine_key`), passed in its environment and
    kept for every restart; None: no key (no gate in front). Out of ``repr``: never logged."""


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When to restart a crashed engine and when to give up."""

    max_crashes: int = 5
    """This many crashes within ``window_s`` is a crash loop: stop retrying."""
    window_s: float = 600.0
    backoff_first_s: float = 1.0
    """Wait before the first restart; doubles with each crash in the window."""
    backoff_max_s: float = 60.0
    give_up_on_permanent: bool = True
    """Do not restart into a failure that repeats with the same file and flags."""

    def delay(self, crashes_in_window: int) -> float:
        """Seconds to wait before the restart after crash number ``crashes_in_window``."""
        return min(self.backoff_first_s * 2 ** max(crashes_in_window - 1, 0), self.backoff_max_s)


class CrashHistory:
    """Crash times within the policy's window, and the restart decision they lead to."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._times: deque[float] = deque()

    def __len__(self) -> int:
        return len(self._times)

    def record(
        self, failure: EngineFailure, now: float, *, port_pinned: bool
    ) -> tuple[float | None, str]:
        """Count a crash at ``now`` (monotonic seconds).

        Returns:
            (seconds to wait before restarting, or None to give up; the words that
            explain giving up, to put before the failure's message).
        """
        self._times.append(now)
        while self._times and self._times[0] < now - self.policy.window_s:
            self._times.popleft()
        crashes = len(self._times)
        if failure.permanent and self.policy.give_up_on_permanent:
            return None, "not restarting (it would fail the same way again): "
        if crashes >= self.policy.max_crashes:
            return None, (
                f"gave up after {crashes} crashes in {self.policy.window_s:g} s (a crash loop); "
                "the last one: "
            )
        if failure.port_conflict and not port_pinned:
            return 0.0, ""  # another program took the port: the next spawn picks a free one
        return self.policy.delay(crashes), ""


class StateMachine:
    """The current state, every transition in order, and the subscribers; thread-safe.

    Subscribers are called after the change, outside the lock, on the thread that
    made it; a subscriber that raises is logged and does not stop the others.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._state = State.STOPPED
        self._events: list[Transition] = []
        self._subscribers: list[Callable[[Transition], None]] = []
        self._failure: EngineFailure | None = None

    @property
    def state(self) -> State:
        with self.lock:
            return self._state

    @property
    def events(self) -> list[Transition]:
        """Every transition so far, oldest first."""
        with self.lock:
            return list(self._events)

    @property
    def failure(self) -> EngineFailure | None:
        """The latest failure; None again once the engine is ready."""
        with self.lock:
            return self._failure

    @failure.setter
    def failure(self, value: EngineFailure | None) -> None:
        with self.lock:
            self._failure = value

    def last(self, state: State) -> Transition | None:
        """The latest transition into ``state``."""
        with self.lock:
            return next((e for e in reversed(self._events) if e.state is state), None)

    def subscribe(self, callback: Callable[[Transition], None]) -> Callable[[], None]:
        """Call ``callback(transition)`` on every change; returns the unsubscribe function."""
        with self.lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self.lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def move(
        self,
        state: State,
        reason: str,
        *,
        attempt: int,
        pid: int | None,
        url: str | None,
        failure: EngineFailure | None = None,
    ) -> Transition:
        """Change to ``state``, record it, tell the subscribers.

        Raises:
            TransitionError: :data:`TRANSITIONS` has no change from the current state to
                ``state`` (nothing changes, nobody is told).
        """
        with self.changed:
            if state not in TRANSITIONS[self._state]:
                raise TransitionError(f"no transition from {self._state} to {state} ({reason})")
            transition = Transition(
                state,
                self._state,
                time.time(),
                time.monotonic(),
                reason,
                attempt,
                pid,
                url,
                failure,
            )
            self._state = state
            self._events.append(transition)
            if state is State.READY:
                self._failure = None
            elif failure is not None:
                self._failure = failure
            subscribers = list(self._subscribers)
            self.changed.notify_all()
        for callback in subscribers:
            try:
                callback(transition)
            except Exception:
                logger.exception("supervisor subscriber failed")
        return transition

    def wait_ready(self, done: threading.Event, timeout_s: float | None) -> Transition | None:
        """Block until READY (its transition) or ``done`` is set (None).

        Raises:
            TimeoutError: neither within ``timeout_s``.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self.changed:
            while self._state is not State.READY and not done.is_set():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError
                self.changed.wait(remaining)
            return self.last(State.READY) if self._state is State.READY else None

    def notify(self) -> None:
        """Wake whoever waits on :attr:`changed` (e.g. the run loop ended)."""
        with self.changed:
            self.changed.notify_all()


class Inbox:
    """What the run loop waits on: stop, release and restart requests, engine exits, log news.

    Everything that should wake the loop sets :attr:`wake`; the loop then asks
    :meth:`pending` what happened (so a wake-up between two looks is never lost).
    """

    def __init__(self) -> None:
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._stop = False
        self._release = False
        self._exited: set[int] = set()
        self._restart: set[int] = set()

    def ask(self, *, stop: bool = False, release: bool = False) -> None:
        """Ask the loop to stop the engine, or to leave it running and end."""
        with self._lock:
            self._stop |= stop
            self._release |= release
        self.wake.set()

    def restart(self, pid: int) -> None:
        """Ask the loop to stop engine ``pid`` and start the spec again (not a crash)."""
        with self._lock:
            self._restart.add(pid)
        self.wake.set()

    def exited(self, pid: int) -> None:
        """Engine ``pid`` exited."""
        with self._lock:
            self._exited.add(pid)
        self.wake.set()

    def forget(self, pid: int) -> None:
        """A new engine got ``pid``: an earlier engine's exit under that number does not count."""
        with self._lock:
            self._exited.discard(pid)

    def pending(self, pid: int | None) -> str | None:
        """ "stop", "release", "restart" or "exited" (engine ``pid``), or None; a restart
        is answered once."""
        with self._lock:
            if self._stop:
                return "stop"
            if self._release:
                return "release"
            if pid in self._restart:
                self._restart.discard(pid)
                return "restart"
            return "exited" if pid in self._exited else None

    def wait(self, timeout_s: float) -> None:
        """Sleep until woken or ``timeout_s`` passed."""
        self.wake.wait(max(timeout_s, 0.0))
        self.wake.clear()

    def until_pending(self, pid: int) -> str:
        """Block until something is pending for engine ``pid``; what it is."""
        while (what := self.pending(pid)) is None:
            self.wait(5.0)
        return what

    def sleep(self, delay_s: float) -> bool:
        """Wait ``delay_s`` unless asked to stop or release; True when asked."""
        deadline = time.monotonic() + delay_s
        while (remaining := deadline - time.monotonic()) > 0:
            if self.pending(None) is not None:
                return True
            self.wait(remaining)
        return self.pending(None) is not None
