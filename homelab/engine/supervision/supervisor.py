"""Keep one engine running: start it, know when it is ready, restart it when it dies, stop it.

Every change of :class:`State` is one that
:data:`~homelab.engine.supervision.states.TRANSITIONS` allows, made as a :class:`Transition`
(timestamped, with the pid, URL, reason and, after a crash, the explained
:class:`~homelab.engine.supervision.failure.EngineFailure`), appended to
:attr:`Supervisor.events` and handed to subscribers.

One run-loop thread (:mod:`homelab.engine.supervision.run_loop`) owns the engine process: it spawns,
waits for readiness, watches for the exit, restarts with exponential backoff, and stops.
This module is what the rest of homelab holds: it picks the first port, opens the session
log, starts that thread (or adopts an engine another homelab started), and lets other
threads ask (``stop``, ``release``) and read. A crash loop (by default 5 crashes in 10
minutes) or a failure that would repeat identically (a bad file, an unknown architecture)
ends the retries, quoting the engine's own lines.

Engine-agnostic: what differs between llama-server and vLLM comes in an
:class:`~homelab.engine.supervision.readiness.EngineProfile`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from homelab.engine.supervision.attempt_log import AttemptLog, LogLine, new_log_path
from homelab.engine.supervision.failure import EngineFailure
from homelab.engine.supervision.ports import PortChoice, choose_port
from homelab.engine.supervision.process import EngineProcess
from homelab.engine.supervision.readiness import EngineProfile
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.run_loop import RunLoop
from homelab.engine.supervision.state_file import EngineRecords, StateFile
from homelab.engine.supervision.states import EngineSpec, RestartPolicy, State, Transition
from homelab.errors import EngineError
from homelab.events import EventHub, Subscription
from homelab.paths import state_dir

__all__ = ["EngineSpec", "RestartPolicy", "State", "Supervisor", "Transition"]

LIVE_QUEUE = 4096
"""Events a live subscriber may fall behind (an engine at -lv 4 logs bursts of lines)."""


class Supervisor:
    """Supervises one engine (see module docstring). Thread-safe; one start per instance.

    Args:
        spec: what to run.
        profile: the engine's health path, serving line and failure reader.
        policy: restart and crash-loop limits.
        state_file: where the running engine is recorded (None: not recorded; tests).
        log_dir: folder of the session logs (default ``state_dir()/logs``).
    """

    def __init__(
        self,
        spec: EngineSpec,
        profile: EngineProfile,
        *,
        policy: RestartPolicy | None = None,
        state_file: StateFile | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.spec = spec
        self.profile = profile
        self.policy = policy or RestartPolicy()
        self._log_dir = log_dir
        self._loop = RunLoop(spec, profile, self.policy, EngineRecords(state_file))
        self._lock = self._loop.lock
        self._thread: threading.Thread | None = None
        self._live: EventHub[Transition | LogLine] = EventHub("supervisor", queue_size=LIVE_QUEUE)
        self._loop.machine.subscribe(self._live.publish)

    # -- reading ---------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._loop.machine.state

    @property
    def events(self) -> list[Transition]:
        """Every transition so far, oldest first."""
        return self._loop.machine.events

    @property
    def pid(self) -> int | None:
        """The engine's pid (the last one, once it stopped)."""
        with self._lock:
            return None if self._loop.proc is None else self._loop.proc.pid

    @property
    def url(self) -> str | None:
        """``http://host:port`` of the current (or last) run."""
        return self._loop.url

    @property
    def port_choice(self) -> PortChoice | None:
        """The port in use and, when it moved, why."""
        with self._lock:
            return self._loop.port

    @property
    def failure(self) -> EngineFailure | None:
        """Why it last crashed or stopped unasked, explained; None once ready again."""
        return self._loop.machine.failure

    @property
    def log_path(self) -> Path | None:
        """The session log the engine writes."""
        return self._loop.log_path

    @property
    def released(self) -> bool:
        """True after :meth:`release` left the engine running."""
        return self._loop.released

    def tail(self, n: int = 20) -> list[str]:
        """The engine's last ``n`` log lines."""
        return self._loop.tail(n)

    def attempt_lines(self) -> list[str]:
        """The log lines of the current (or last) run, from its start (e.g. its load log)."""
        log = self._loop.log
        return [] if log is None else log.lines()

    def subscribe(
        self, callback: Callable[[Transition], None], *, log_lines: bool = False
    ) -> Callable[[], None]:
        """Call ``callback(transition)`` on every change, on the thread that made it; keep it quick.

        With ``log_lines``: ``callback`` gets the transitions *and* every engine log line
        (:class:`~homelab.engine.supervision.attempt_log.LogLine`), in order, on a thread
        of its own (:mod:`homelab.events`), so it never holds the engine up; it may fall
        ``LIVE_QUEUE`` events behind before its oldest are dropped. For an adopted engine
        the recent lines already in its log come first. :meth:`stop` and :meth:`release`
        end these subscriptions once everything queued was delivered.

        Returns:
            A function that unsubscribes.
        """
        if log_lines:
            live = cast("Callable[[Transition | LogLine], None]", callback)
            subscription: Subscription[Transition | LogLine] = self._live.subscribe(live)
            return subscription
        return self._loop.machine.subscribe(callback)

    # -- control ---------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the engine; returns once it runs (not yet ready: see :meth:`wait_ready`).

        Raises:
            EngineError: already started, the pinned port is taken, or the engine
                could not be spawned.
        """
        loop = self._loop
        with self._lock:
            if self._thread is not None:
                raise EngineError("this supervisor was already started")
            port = choose_port(self.spec.host, self.spec.port, pinned=self.spec.port_pinned)
            path = new_log_path(self._log_dir or state_dir() / "logs", self.profile.name)
            log = AttemptLog(
                path, self.profile.is_serving, loop.inbox.wake.set, on_line=self._live.publish
            )
            loop.prepare(port, log.start())
            self._thread = threading.Thread(
                target=loop.run, args=(None,), name="homelab-supervisor"
            )
            self._thread.start()
        loop.spawned.wait()
        if loop.spawn_error is not None:
            self._thread.join()
            raise loop.spawn_error

    def adopt(self, record: EngineRecord) -> None:
        """Supervise an engine another homelab started (from the state file).

        Raises:
            EngineError: already started, or the recorded engine is gone.
        """
        loop = self._loop
        why_not = record.not_the_engine()
        if why_not is not None:
            raise EngineError(f"the recorded engine cannot be adopted: {why_not}")
        proc = EngineProcess.adopt(record.pid, pgid=record.pgid, create_time=record.create_time)
        log = AttemptLog(
            Path(record.log_path),
            self.profile.is_serving,
            loop.inbox.wake.set,
            adopt=True,
            on_line=self._live.publish,
        )
        if record.ready_at is not None:
            log.mark_serving()
        with self._lock:
            if self._thread is not None:
                raise EngineError("this supervisor was already started")
            port = PortChoice(record.host, record.port, record.port)
            loop.prepare_adopted(proc, port, log.start())
            self._thread = threading.Thread(
                target=loop.run, args=(proc,), name="homelab-supervisor"
            )
        loop.records.claimed(record.pid)
        loop.set(State.STARTING, f"adopted {self.profile.name} pid {proc.pid}")
        proc.watch(lambda p: loop.inbox.exited(p.pid), loop.done)
        self._thread.start()
        loop.spawned.set()

    def wait_ready(self, timeout_s: float | None = None, *, after: int | None = None) -> Transition:
        """Block until the engine is ready; returns the READY transition.

        ``after``: the READY of an attempt later than this one (a restart that was just
        asked for moves the loop off the old attempt within moments).

        Raises:
            HomelabError: it stopped instead (the explained failure), or ``timeout_s`` passed.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready = self._loop.machine.wait_ready(self._loop.done, left)
            except TimeoutError:
                raise EngineError(
                    f"{self.profile.name} was not ready within {timeout_s:g} s"
                ) from None
            if ready is None:
                if self.failure is not None:
                    raise self.failure.to_error()
                raise EngineError(f"{self.profile.name} stopped before it was ready")
            if after is None or (ready.attempt > after and self.state is State.READY):
                return ready
            if deadline is not None and time.monotonic() >= deadline:
                raise EngineError(f"{self.profile.name} was not ready within {timeout_s:g} s")
            time.sleep(0.05)  # still the old attempt, about to end

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        """Block until the supervisor is done (stopped, gave up, or released); True if it is."""
        return self._loop.done.wait(timeout_s)

    def stop(self) -> None:
        """Stop the engine (SIGTERM to its group, wait, SIGKILL) and wait for STOPPED."""
        self._ask(stop=True)

    def release(self) -> None:
        """Stop supervising and leave a detached engine running (the next homelab adopts it).

        Raises:
            EngineError: the engine is our child and not detached: it dies with its supervisor.
        """
        with self._lock:
            proc = self._loop.proc
            if proc is not None and proc.is_child and not self.spec.detached:
                raise EngineError(
                    "only a detached engine can be left running",
                    hint="start it with `detach` set to leave it running",
                )
        self._ask(release=True)

    def carry(self, **fields: object) -> None:
        """Keep ``fields`` in the engine's record, now and after every restart (a keeper)."""
        with self._lock:
            proc = self._loop.proc
        self._loop.records.carry(None if proc is None else proc.pid, **fields)

    def respec(self, spec: EngineSpec, *, restart: bool = False) -> None:
        """Run ``spec`` (a healed, smaller plan's argv and facts) from the next (re)start on;
        with ``restart``, the loop stops the running engine now and starts ``spec`` (a
        RESTARTING transition, not a crash: it counts for no crash loop)."""
        with self._lock:
            self.spec = self._loop.spec = spec
            proc = self._loop.proc
        if restart and proc is not None:
            self._loop.inbox.restart(proc.pid)

    def _ask(self, *, stop: bool = False, release: bool = False) -> None:
        self._loop.inbox.ask(stop=stop, release=release)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
            self._live.close()  # live subscribers get what is queued, then their threads end

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._loop.released:
            self.stop()
