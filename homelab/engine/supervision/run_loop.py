"""The supervisor's run loop: the one thread that owns the engine process.

It spawns every attempt itself (so the parent-death signal, which Linux ties to the
forking *thread*, stays armed for as long as the supervisor lives), waits for readiness,
watches for the exit, explains a crash, restarts with exponential backoff, and in the end
stops the engine or leaves it running. An unexpected exit is a crash unless the state
file says someone asked for the stop (``homelab stop`` / ``--replace``). A crash loop or
a failure that would repeat identically ends the retries.

:class:`~homelab.engine.supervision.supervisor.Supervisor` sets the loop up and runs it on a thread;
other threads only ask (through the :class:`~homelab.engine.supervision.states.Inbox`) and read
what the loop publishes under its ``lock``.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine.supervision.attempt_log import AttemptLog, marker_line
from homelab.engine.supervision.failure import EngineFailure, start_timeout
from homelab.engine.supervision.identity import marker_env, new_engine_id
from homelab.engine.supervision.ports import PortChoice, choose_port, with_port
from homelab.engine.supervision.process import EngineProcess
from homelab.engine.supervision.readiness import EngineProfile, await_ready, health_client
from homelab.engine.supervision.record import new_record
from homelab.engine.supervision.state_file import EngineRecords
from homelab.engine.supervision.states import (
    CrashHistory,
    EngineSpec,
    Inbox,
    RestartPolicy,
    State,
    StateMachine,
)
from homelab.errors import HomelabError

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

RESTART_GRACE_S = 4.0
"""An asked-for restart's stop: SIGTERM, 2 s, SIGTERM again (llama-server then exits at once,
even with a request in flight, which a first SIGTERM waits for), 2 s, SIGKILL."""


class RunLoop:
    """One engine's attempts, one after another, until it stops (see the module docstring).

    Set up with :meth:`prepare` (a fresh engine) or :meth:`prepare_adopted` (one that
    runs already), then call :meth:`run` on a thread of its own.

    Attributes:
        machine: the state machine every transition goes through.
        lock: guards ``proc``, ``port``, ``attempt`` and ``attempt_started``.
        inbox: how other threads ask it to stop or release, and how exits arrive.
        done: set once the loop has ended.
        spawned: set once the first attempt is spawned (or failed to spawn).
        spawn_error: why the first attempt could not be spawned, when it could not.
        released: the loop ended leaving the engine running.
    """

    def __init__(
        self,
        spec: EngineSpec,
        profile: EngineProfile,
        policy: RestartPolicy,
        records: EngineRecords,
    ) -> None:
        self.spec = spec
        self.profile = profile
        self.policy = policy
        self.records = records
        self.machine = StateMachine()
        self.lock = self.machine.lock
        self.inbox = Inbox()
        self.done = threading.Event()
        self.spawned = threading.Event()
        self.proc: EngineProcess | None = None
        self.port: PortChoice | None = None
        self.log: AttemptLog | None = None
        self.attempt = 0
        self.attempt_started = 0.0
        self.spawn_error: HomelabError | None = None
        self.released = False
        self._crashes = CrashHistory(policy)

    # -- set-up (by the supervisor, holding ``lock``) -----------------------------------------

    def prepare(self, port: PortChoice, log: AttemptLog) -> None:
        """Start fresh: the first attempt will listen on ``port`` and write into ``log``."""
        self.port = port
        self.log = log

    def prepare_adopted(self, proc: EngineProcess, port: PortChoice, log: AttemptLog) -> None:
        """Take over ``proc`` (running already, on ``port``, writing into ``log``)."""
        self.port = port
        self.log = log
        self.attempt = log.attempt
        self.proc = proc
        self.attempt_started = time.monotonic()

    # -- reading -------------------------------------------------------------------------------

    @property
    def url(self) -> str | None:
        """``http://host:port`` of the current (or last) attempt."""
        with self.lock:
            return None if self.port is None else f"http://{self.port.host}:{self.port.port}"

    @property
    def log_path(self) -> Path | None:
        """The session log the engine writes (None before there is one)."""
        return None if self.log is None else self.log.path

    def tail(self, n: int) -> list[str]:
        """The engine's last ``n`` log lines."""
        return [] if self.log is None else self.log.tail(n)

    # -- the loop ------------------------------------------------------------------------------

    def run(self, adopted: EngineProcess | None) -> None:
        """Run attempts until asked to stop or release, or until the engine cannot be kept up."""
        proc, outcome, failure = adopted, "stop", None
        client = health_client(self.spec.api_key)  # the same key on every attempt
        try:
            while True:
                proc, outcome, failure = self._one_run(proc, client)
                if outcome == "crashed":
                    outcome = self._after_crash(failure)
                if outcome != "restart":
                    break
            self._finish(proc, outcome, failure)
        except Exception as error:  # a bug (a refused transition too) must not leave an engine
            logger.exception("supervisor run loop failed")
            failure = EngineFailure(
                "Supervisor failed", f"homelab's supervisor failed: {error}", None
            )
            with self.lock:
                current = self.proc  # the attempt the failure came in, ended or not
            self._finish(current, "error", failure)
        finally:
            client.close()
            self.spawned.set()
            self.done.set()
            self.machine.notify()

    def _one_run(self, proc: EngineProcess | None, client: httpx.Client) -> tuple:
        """Spawn (unless adopted), wait for ready, watch: (process, how it ended, its failure)."""
        if proc is None:
            try:
                proc = self._spawn()
            except HomelabError as error:
                failure = EngineFailure(error.title, error.message, error.hint)
                if self.attempt > 1:
                    return None, "crashed", failure
                self.spawn_error = error
                return None, "spawn_failed", failure
            finally:
                self.spawned.set()
        assert self.log is not None
        outcome = await_ready(
            self.inbox,
            proc.pid,
            serving=self.log.serving,
            url=lambda: self.url,
            health_path=self.profile.health_path,
            client=client,
            deadline=self.attempt_started + self.spec.start_timeout_s,
            probe=self.profile.probe,
        )
        if outcome == "ready":
            self._on_ready(proc)
            outcome = self.inbox.until_pending(proc.pid)
        if outcome == "restart":  # asked (a healed or re-planned spec): not a crash
            self.set(State.RESTARTING, "restarting on the new plan")
            proc.stop(min(self.spec.stop_grace_s, RESTART_GRACE_S))
            proc.close()
            return None, "restart", None
        if outcome != "exited":
            return proc, outcome, None
        if self.records.stop_asked(proc.pid):
            return None, "external", None
        return None, "crashed", self._diagnose(proc)

    def _after_crash(self, failure: EngineFailure) -> str:
        """Report the crash; wait the backoff: "restart", or "gave_up" / "stop" / "external".

        A subscriber that gave the loop a new spec on the crash (a heal: the plan was wrong)
        restarts it at once, not counted toward a crash loop (the heal bounds its own steps).
        """
        crashed_on = self.spec
        self.set(State.CRASHED, failure.title, failure)
        if self.spec is not crashed_on and self.inbox.pending(None) is None:
            self.set(State.RESTARTING, "restarting on the new plan")
            return "restart"
        now = time.monotonic()
        delay, why = self._crashes.record(failure, now, port_pinned=self.spec.port_pinned)
        if delay is None:
            self.machine.failure = failure.with_prefix(why)
            return "gave_up"
        window = f"{len(self._crashes)} crash(es) in the last {self.policy.window_s:g} s"
        self.set(State.RESTARTING, f"restart in {delay:.1f} s ({window})")
        if self.inbox.sleep(delay):
            return "stop"
        last = self.proc
        if last is not None and self.records.stop_asked(last.pid):
            return "external"  # `homelab stop` came while it waited to restart
        return "restart"

    def _spawn(self) -> EngineProcess:
        with self.lock:
            self.attempt += 1
            attempt = self.attempt
            if attempt > 1:
                self.port = choose_port(
                    self.spec.host, self.spec.port, pinned=self.spec.port_pinned
                )
            port, log = self.port, self.log
        assert port is not None and log is not None
        argv = with_port(list(self.spec.argv), port.host, port.port)
        log.begin(attempt)
        engine_id = new_engine_id()
        marker = {} if self.records.path is None else marker_env(engine_id, self.records.path)
        key_env, key = self.profile.key_env, self.spec.api_key
        secret = {} if key is None or key_env is None else {key_env: key}  # never on argv
        proc = EngineProcess.spawn(
            argv,
            log.path,
            die_with_parent=not self.spec.detached,
            env={**self.profile.env, **marker, **secret},
            header=marker_line(attempt, argv),
            memory_limit=self.spec.memory_limit,
        )
        with self.lock:
            self.proc = proc
            self.attempt_started = time.monotonic()
        self.inbox.forget(proc.pid)
        record = new_record(self.profile.kind, proc, argv, port, self.spec, log.path, engine_id)
        self.records.spawned(record)
        proc.watch(lambda p: self.inbox.exited(p.pid), self.done)
        self.set(State.STARTING, f"attempt {attempt}")
        return proc

    def _on_ready(self, proc: EngineProcess) -> None:
        if self.log is not None:
            self.log.settle()
        self.records.ready(proc.pid)
        self.set(State.READY, f"ready in {time.monotonic() - self.attempt_started:.2f} s")

    def _diagnose(self, proc: EngineProcess) -> EngineFailure:
        lines = [] if self.log is None else self.log.lines()
        proc.close()
        return self.profile.diagnose(lines, proc.returncode)

    def _finish(
        self, proc: EngineProcess | None, outcome: str, failure: EngineFailure | None = None
    ) -> None:
        """End the run loop: stop (or leave running, when released) and say how it ended.

        ``outcome``: stop, release, external, gave_up, timeout, spawn_failed or error.
        """
        last = self.proc
        if outcome in ("stop", "release", "external"):
            failure = None  # asked for: the last crash (if any) is history
        if outcome == "release":
            self.released = True
            if last is not None:
                self.records.released(last.pid)
        elif outcome == "external":
            self.set(State.STOPPED, "stopped from outside (a stop or a replace)")
        else:
            if outcome == "gave_up":
                failure = self.machine.failure
            elif outcome == "timeout":
                tail = self.tail(40)
                failure = start_timeout(
                    self.profile.name, self.spec.start_timeout_s, tail, str(self.log_path)
                )
            if outcome in ("stop", "timeout", "error") and self.machine.state is not State.STOPPING:
                self.set(
                    State.STOPPING,
                    {"stop": "stop requested", "timeout": "start timed out"}.get(
                        outcome, "supervisor failed"
                    ),
                )
            if proc is not None:
                proc.stop(self.spec.stop_grace_s)
            self.records.cleared(None if last is None else last.pid)
            self.set(State.STOPPED, failure.title if failure else "stopped", failure)
        if proc is not None and outcome != "release":
            proc.close()
        if self.log is not None:
            self.log.stop()

    # -- state -----------------------------------------------------------------------------------

    def set(self, state: State, reason: str, failure: EngineFailure | None = None) -> None:
        """Move to ``state`` (a transition every subscriber hears of)."""
        with self.lock:
            proc, attempt = self.proc, self.attempt
        self.machine.move(
            state,
            reason,
            attempt=attempt,
            pid=None if proc is None else proc.pid,
            url=self.url,
            failure=failure,
        )
