"""Keep one engine running: start it, know when it is ready, restart it when it dies, stop it.

States::

    stopped -> starting -> ready -> (crashed -> restarting -> starting ...) -> stopping -> stopped

Every change is a :class:`Transition` (timestamped, with the pid, URL, reason and,
after a crash, the explained :class:`~homelab.engine.failure.EngineFailure`),
appended to :attr:`Supervisor.events` and handed to subscribers.

One run-loop thread owns the engine process: it spawns (so the parent-death
signal, which Linux ties to the forking *thread*, stays armed for as long as
the supervisor lives), waits for readiness, watches for the exit, restarts with
exponential backoff, and stops. Other threads only ask (``stop``, ``release``)
and read. An unexpected exit is a crash unless the state file says someone
asked for the stop (``homelab stop`` / ``--replace``). A crash loop (by default
5 crashes in 10 minutes) or a failure that would repeat identically (a bad
file, an unknown architecture) ends the retries, quoting the engine's own lines.

Engine-agnostic: what differs between llama-server and vLLM comes in an
:class:`~homelab.engine.readiness.EngineProfile`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from homelab.engine.attempt_log import AttemptLog, marker_line, new_log_path
from homelab.engine.failure import EngineFailure, start_timeout
from homelab.engine.ports import PortChoice, choose_port, with_port
from homelab.engine.process import EngineProcess
from homelab.engine.readiness import EngineProfile, await_ready, health_client
from homelab.engine.state_file import EngineRecord, EngineRecords, StateFile, new_record
from homelab.engine.supervision import (
    CrashHistory,
    EngineSpec,
    Inbox,
    RestartPolicy,
    State,
    StateMachine,
    Transition,
)
from homelab.errors import EngineError, HomelabError
from homelab.paths import state_dir

__all__ = ["EngineSpec", "RestartPolicy", "State", "Supervisor", "Transition"]

logger = logging.getLogger(__name__)


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
        self._records = EngineRecords(state_file)
        self._log_dir = log_dir
        self._machine = StateMachine()
        self._lock = self._machine.lock
        self._inbox = Inbox()
        self._done = threading.Event()
        self._spawned = threading.Event()
        self._proc: EngineProcess | None = None
        self._port: PortChoice | None = None
        self._attempt = 0
        self._attempt_started = 0.0
        self._crashes = CrashHistory(self.policy)
        self._spawn_error: HomelabError | None = None
        self._released = False
        self._thread: threading.Thread | None = None
        self._log: AttemptLog | None = None

    # -- reading ---------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._machine.state

    @property
    def events(self) -> list[Transition]:
        """Every transition so far, oldest first."""
        return self._machine.events

    @property
    def pid(self) -> int | None:
        """The engine's pid (the last one, once it stopped)."""
        with self._lock:
            return None if self._proc is None else self._proc.pid

    @property
    def url(self) -> str | None:
        """``http://host:port`` of the current (or last) run."""
        with self._lock:
            return None if self._port is None else f"http://{self._port.host}:{self._port.port}"

    @property
    def port_choice(self) -> PortChoice | None:
        """The port in use and, when it moved, why."""
        with self._lock:
            return self._port

    @property
    def failure(self) -> EngineFailure | None:
        """Why it last crashed or stopped unasked, explained; None once ready again."""
        return self._machine.failure

    @property
    def log_path(self) -> Path | None:
        """The session log the engine writes."""
        return None if self._log is None else self._log.path

    @property
    def released(self) -> bool:
        """True after :meth:`release` left the engine running."""
        return self._released

    def tail(self, n: int = 20) -> list[str]:
        """The engine's last ``n`` log lines."""
        return [] if self._log is None else self._log.tail(n)

    def attempt_lines(self) -> list[str]:
        """The log lines of the current (or last) run, from its start (e.g. its load log)."""
        return [] if self._log is None else self._log.lines()

    def subscribe(self, callback: Callable[[Transition], None]) -> Callable[[], None]:
        """Call ``callback(transition)`` on every change, on the thread that made it; keep it quick.

        Returns:
            A function that unsubscribes.
        """
        return self._machine.subscribe(callback)

    # -- control ---------------------------------------------------------------------------

    def start(self) -> None:
        """Spawn the engine; returns once it runs (not yet ready: see :meth:`wait_ready`).

        Raises:
            EngineError: already started, the pinned port is taken, or the engine
                could not be spawned.
        """
        with self._lock:
            if self._thread is not None:
                raise EngineError("this supervisor was already started")
            self._port = choose_port(self.spec.host, self.spec.port, pinned=self.spec.port_pinned)
            path = new_log_path(self._log_dir or state_dir() / "logs", self.profile.name)
            self._log = AttemptLog(path, self.profile.is_serving, self._inbox.wake.set).start()
            self._thread = threading.Thread(
                target=self._run, args=(None,), name="homelab-supervisor"
            )
            self._thread.start()
        self._spawned.wait()
        if self._spawn_error is not None:
            self._thread.join()
            raise self._spawn_error

    def adopt(self, record: EngineRecord) -> None:
        """Supervise an engine another homelab started (from the state file).

        Raises:
            EngineError: already started, or the recorded engine is gone.
        """
        proc = EngineProcess.adopt(record.pid, pgid=record.pgid, create_time=record.create_time)
        log = AttemptLog(
            Path(record.log_path), self.profile.is_serving, self._inbox.wake.set, adopt=True
        )
        if record.ready_at is not None:
            log.mark_serving()
        with self._lock:
            if self._thread is not None:
                raise EngineError("this supervisor was already started")
            self._port = PortChoice(record.host, record.port, record.port)
            self._log = log.start()
            self._attempt = log.attempt
            self._proc = proc
            self._attempt_started = time.monotonic()
            self._thread = threading.Thread(
                target=self._run, args=(proc,), name="homelab-supervisor"
            )
        self._records.claimed(record.pid)
        self._set(State.STARTING, f"adopted {self.profile.name} pid {proc.pid}")
        proc.watch(lambda p: self._inbox.exited(p.pid), self._done)
        self._thread.start()
        self._spawned.set()

    def wait_ready(self, timeout_s: float | None = None) -> Transition:
        """Block until the engine is ready; returns the READY transition.

        Raises:
            HomelabError: it stopped instead (the explained failure), or ``timeout_s`` passed.
        """
        try:
            ready = self._machine.wait_ready(self._done, timeout_s)
        except TimeoutError:
            raise EngineError(f"{self.profile.name} was not ready within {timeout_s:g} s") from None
        if ready is not None:
            return ready
        if self.failure is not None:
            raise self.failure.to_error()
        raise EngineError(f"{self.profile.name} stopped before it was ready")

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        """Block until the supervisor is done (stopped, gave up, or released); True if it is."""
        return self._done.wait(timeout_s)

    def stop(self) -> None:
        """Stop the engine (SIGTERM to its group, wait, SIGKILL) and wait for STOPPED."""
        self._ask(stop=True)

    def release(self) -> None:
        """Stop supervising and leave a detached engine running (the next homelab adopts it).

        Raises:
            EngineError: the engine is our child and not detached: it dies with its supervisor.
        """
        with self._lock:
            proc = self._proc
            if proc is not None and proc.is_child and not self.spec.detached:
                raise EngineError("only a detached engine can be left running (--detach)")
        self._ask(release=True)

    def _ask(self, *, stop: bool = False, release: bool = False) -> None:
        self._inbox.ask(stop=stop, release=release)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._released:
            self.stop()

    # -- the run loop ----------------------------------------------------------------------

    def _run(self, adopted: EngineProcess | None) -> None:
        proc, outcome, failure = adopted, "stop", None
        client = health_client()
        try:
            while True:
                proc, outcome, failure = self._one_run(proc, client)
                if outcome == "crashed":
                    outcome = self._after_crash(failure)
                if outcome != "restart":
                    break
            self._finish(proc, outcome, failure)
        except Exception as error:  # a bug here must not leave an engine behind
            logger.exception("supervisor run loop failed")
            failure = EngineFailure(
                "Supervisor failed", f"homelab's supervisor failed: {error}", None
            )
            self._finish(proc, "error", failure)
        finally:
            client.close()
            self._spawned.set()
            self._done.set()
            self._machine.notify()

    def _one_run(self, proc: EngineProcess | None, client) -> tuple:
        """Spawn (unless adopted), wait for ready, watch: (process, how it ended, its failure)."""
        if proc is None:
            try:
                proc = self._spawn()
            except HomelabError as error:
                failure = EngineFailure(error.title, error.message, error.hint)
                if self._attempt > 1:
                    return None, "crashed", failure
                self._spawn_error = error
                return None, "spawn_failed", failure
            finally:
                self._spawned.set()
        assert self._log is not None
        outcome = await_ready(
            self._inbox,
            proc.pid,
            serving=self._log.serving,
            url=lambda: self.url,
            health_path=self.profile.health_path,
            client=client,
            deadline=self._attempt_started + self.spec.start_timeout_s,
        )
        if outcome == "ready":
            self._on_ready(proc)
            outcome = self._inbox.until_pending(proc.pid)
        if outcome != "exited":
            return proc, outcome, None
        if self._records.stop_asked(proc.pid):
            return None, "external", None
        return None, "crashed", self._diagnose(proc)

    def _after_crash(self, failure: EngineFailure) -> str:
        """Report the crash; wait the backoff: "restart", or "gave_up" / "stop" / "external"."""
        self._set(State.CRASHED, failure.title, failure)
        now = time.monotonic()
        delay, why = self._crashes.record(failure, now, port_pinned=self.spec.port_pinned)
        if delay is None:
            self._machine.failure = failure.with_prefix(why)
            return "gave_up"
        window = f"{len(self._crashes)} crash(es) in the last {self.policy.window_s:g} s"
        self._set(State.RESTARTING, f"restart in {delay:.1f} s ({window})")
        if self._inbox.sleep(delay):
            return "stop"
        last = self._proc
        if last is not None and self._records.stop_asked(last.pid):
            return "external"  # `homelab stop` came while it waited to restart
        return "restart"

    def _spawn(self) -> EngineProcess:
        with self._lock:
            self._attempt += 1
            attempt = self._attempt
            if attempt > 1:
                self._port = choose_port(
                    self.spec.host, self.spec.port, pinned=self.spec.port_pinned
                )
            port, log = self._port, self._log
        assert port is not None and log is not None
        argv = with_port(list(self.spec.argv), port.host, port.port)
        log.begin(attempt)
        proc = EngineProcess.spawn(
            argv,
            log.path,
            die_with_parent=not self.spec.detached,
            env=self.profile.env,
            header=marker_line(attempt, argv),
        )
        with self._lock:
            self._proc = proc
            self._attempt_started = time.monotonic()
        self._inbox.forget(proc.pid)
        self._records.spawned(new_record(self.profile.name, proc, argv, port, self.spec, log.path))
        proc.watch(lambda p: self._inbox.exited(p.pid), self._done)
        self._set(State.STARTING, f"attempt {attempt}")
        return proc

    def _on_ready(self, proc: EngineProcess) -> None:
        if self._log is not None:
            self._log.settle()
        self._records.ready(proc.pid)
        self._set(State.READY, f"ready in {time.monotonic() - self._attempt_started:.2f} s")

    def _diagnose(self, proc: EngineProcess) -> EngineFailure:
        lines = [] if self._log is None else self._log.lines()
        proc.close()
        return self.profile.diagnose(lines, proc.returncode)

    def _finish(
        self, proc: EngineProcess | None, outcome: str, failure: EngineFailure | None = None
    ) -> None:
        """End the run loop: stop (or leave running, when released) and say how it ended.

        ``outcome``: stop, release, external, gave_up, timeout, spawn_failed or error.
        """
        last = self._proc
        if outcome in ("stop", "release", "external"):
            failure = None  # asked for: the last crash (if any) is history
        if outcome == "release":
            self._released = True
            if last is not None:
                self._records.released(last.pid)
        elif outcome == "external":
            self._set(State.STOPPED, "stopped from outside (homelab stop or --replace)")
        else:
            if outcome == "gave_up":
                failure = self.failure
            elif outcome == "timeout":
                tail = self.tail(40)
                failure = start_timeout(
                    self.profile.name, self.spec.start_timeout_s, tail, str(self.log_path)
                )
            if outcome in ("stop", "timeout", "error"):
                self._set(
                    State.STOPPING,
                    {"stop": "stop requested", "timeout": "start timed out"}.get(
                        outcome, "supervisor failed"
                    ),
                )
            if proc is not None:
                proc.stop(self.spec.stop_grace_s)
            self._records.cleared(None if last is None else last.pid)
            self._set(State.STOPPED, failure.title if failure else "stopped", failure)
        if proc is not None and outcome != "release":
            proc.close()
        if self._log is not None:
            self._log.stop()

    # -- state and record --------------------------------------------------------------------

    def _set(self, state: State, reason: str, failure: EngineFailure | None = None) -> None:
        with self._lock:
            proc, attempt = self._proc, self._attempt
        self._machine.move(
            state,
            reason,
            attempt=attempt,
            pid=None if proc is None else proc.pid,
            url=self.url,
            failure=failure,
        )
