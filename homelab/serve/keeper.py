"""homelab's keeper: a detached serve supervised like a foreground one.

``homelab serve MODEL --detach`` does not start the engine itself: it starts one process,
the **keeper** (:func:`launch`: ``python -m homelab serve ... --keeper-fd N``, in a session
and process group of its own), which runs the same serve session a terminal would — plan,
pull, adopt/replace/refuse, start, ready, proof — and relays what it says to the serve that
started it. Once the engine is ready and the gate listens it writes one JSON line on the
notice pipe (``{"ready": true, "url": ...}``), sends its own output to a rotated log
(``state_dir()/logs/keeper-….log``, :mod:`homelab.gate.log_file`) and stays: the launching
serve returns 0. A start that fails ends the keeper with the failure's exit code, which the
launching serve returns after relaying the error.

What the keeper does (:class:`Keeper`):

- **the engine** is supervised by the session's supervisor, as in a terminal: restarted
  after a crash with the same backoff and crash-loop rule
  (:class:`~homelab.engine.supervision.states.RestartPolicy`). It is spawned detached (no
  parent-death signal): a keeper that is SIGKILLed leaves it serving, and the next serve of
  the model adopts it and starts a new keeper.
- **the gate** runs in a process of its own (:mod:`homelab.serve.gate_process`), the
  keeper's child in its own session. Why not on a thread of the keeper: a keeper that is
  killed would take the public port down with it, while a gate process goes on serving the
  engine clients know until the next serve adopts both; and a gate that dies (killed, a
  fault) is found by the keeper's look each second and started again on the same public
  port, with the same backoff and crash-loop rule as the engine.
- **the record** names the keeper (``supervisor_pid``, ``kept``) and its latest restarts
  (:mod:`homelab.engine.supervision.restarts`); a keeper that stops restarting (a crash
  loop, a failure that would repeat) leaves a note saying why, which ``homelab status``
  shows.
- **SIGTERM** (``homelab stop``, a ``--replace``) stops the gate and the engine cleanly,
  then the keeper ends.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from homelab.engine.supervision.failure import EngineFailure
from homelab.engine.supervision.restarts import (
    KeeperEnd,
    Restart,
    clear_end,
    with_restart,
    write_end,
)
from homelab.engine.supervision.states import CrashHistory, State, Transition
from homelab.errors import ExitCode, HomelabError
from homelab.serve.session import ServeSession

logger = logging.getLogger("homelab.keeper")

WATCH_S = 1.0
"""How often the keeper looks at its gate process."""


def launch(words: Sequence[str], out: IO[bytes], err: IO[bytes]) -> int:
    """Start the keeper (``python -m homelab`` with ``words`` and the notice pipe), relay its
    output to ``out``/``err`` until it is ready or has ended; its exit code (0 once ready).

    ``words`` are serve's own (without ``--detach``); a Ctrl-C here stops the keeper."""
    notice_r, notice_w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "homelab", *words, "--keeper-fd", str(notice_w)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(notice_w,),
        start_new_session=True,
    )
    os.close(notice_w)
    assert proc.stdout is not None and proc.stderr is not None
    sinks = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    open_fds, notice = [*sinks, notice_r], b""
    try:
        while open_fds:
            ready, _, _ = select.select(open_fds, [], [])
            for fd in ready:
                data = os.read(fd, 65536)
                if not data:
                    open_fds.remove(fd)
                elif fd == notice_r:
                    notice += data
                else:
                    sinks[fd].write(data)
                    sinks[fd].flush()
    except KeyboardInterrupt:
        proc.terminate()  # the keeper stops what it started
        proc.wait()
        raise
    finally:
        os.close(notice_r)
        proc.stdout.close()
        proc.stderr.close()
    with contextlib.suppress(ValueError):
        if json.loads(notice or b"null") is not None:
            proc.returncode = 0  # it lives on, on its own: never reaped here
            return int(ExitCode.OK)
    code = proc.wait()
    return code if code > 0 else int(ExitCode.OK if code == 0 else ExitCode.FAILURE)


def go_quiet(notice_fd: int, log_path: Path, url: str | None, stop_asked: threading.Event) -> None:
    """The keeper is ready: say so on the notice pipe (the launching serve returns), send its
    words to its rotated log from now on, and let SIGTERM / SIGINT set ``stop_asked``."""
    from homelab.gate.log_file import log_to_file

    sys.stdout.flush()
    sys.stderr.flush()
    log_to_file(log_path)
    sys.stdout = sys.stderr = _LogWriter()
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), 1)
        os.dup2(null.fileno(), 2)
    with contextlib.suppress(OSError):
        os.write(notice_fd, json.dumps({"ready": True, "url": url}).encode() + b"\n")
    os.close(notice_fd)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop_asked.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    logger.info("keeping %s (pid %d)", url, os.getpid())


class _LogWriter(io.TextIOBase):
    """``print`` after the keeper went to its log: each line one log line (rotated)."""

    def __init__(self) -> None:
        self._partial = ""

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            if line.strip():
                logger.info("%s", line.rstrip("\r"))
        return len(text)


class Keeper:
    """The keeper's side of one session: the record's name, the restarts, the gate's watch."""

    def __init__(self, session: ServeSession) -> None:
        self.session = session
        self.restarts: tuple[Restart, ...] = ()
        self._gate_crashes: CrashHistory | None = None
        self._gate_back_at: float | None = None
        self.stop_asked = threading.Event()

    def attach(self) -> None:
        """After the session started (spawned or adopted): name the keeper in the record."""
        clear_end()
        supervisor = self.session.supervisor
        assert supervisor is not None
        if self.session.adopted is not None:
            self.restarts = self.session.adopted.restarts
        self._gate_crashes = CrashHistory(supervisor.policy)  # the engine's rule
        supervisor.carry(kept=True, restarts=self.restarts)
        supervisor.subscribe(self._changed)

    def _changed(self, transition: Transition) -> None:
        failure = transition.failure
        if transition.state is State.CRASHED and failure is not None:
            self._restarted(Restart("engine", transition.at, failure.title, failure.returncode))

    def _restarted(self, restart: Restart) -> None:
        self.restarts = with_restart(self.restarts, restart)
        supervisor = self.session.supervisor
        if supervisor is not None:
            supervisor.carry(restarts=self.restarts)

    def announce(self, notice_fd: int, log_path: Path) -> None:
        """Ready: the launching serve may return; from now on the keeper's words go to its log."""
        self.session.bus.flush()
        go_quiet(notice_fd, log_path, self.session.public_url, self.stop_asked)

    def keep(self) -> int:
        """Keep the engine and its gate until SIGTERM or until the supervisor gives up; the
        exit code (0: stopped; a gave-up failure's code, its note left for ``status``)."""
        session = self.session
        supervisor = session.supervisor
        assert supervisor is not None
        while not self.stop_asked.wait(WATCH_S):
            if supervisor.wait_stopped(0):
                break
            try:
                self._watch_gate()
            except HomelabError as error:
                logger.error("the gate cannot be kept: %s", error.message)
                self._ended(error)
                session.stop(let_go=False)
                return int(error.exit_code)
        if self.stop_asked.is_set():
            logger.info("stopping (asked)")
            session.stop(let_go=False)
            return int(ExitCode.OK)
        try:
            session.finish()
        except HomelabError as error:
            self._ended(error)
            logger.error("ended: %s: %s", error.title, error.message)
            return int(error.exit_code)
        logger.info("the engine was stopped from outside")
        return int(ExitCode.OK)

    def _ended(self, error: HomelabError) -> None:
        supervisor = self.session.supervisor
        model = "" if supervisor is None else supervisor.spec.model
        note = KeeperEnd(model, time.time(), f"{error.title}: {error.message}", self.restarts)
        with contextlib.suppress(OSError):
            write_end(note)

    def _watch_gate(self) -> None:
        """A gate process that died is started again after the backoff; a crash loop of the
        gate ends the serve (never an engine left without the gate asked for).

        Raises:
            HomelabError: the gate gave up, or could not listen again.
        """
        gate, supervisor = self.session.gate, self.session.supervisor
        if gate is None or supervisor is None or self._gate_crashes is None:
            return
        now = time.monotonic()
        if self._gate_back_at is None:
            died, code = gate.exited()
            if not died:
                return
            failure = EngineFailure(
                "the gate died", "the gate process exited", None, returncode=code
            )
            self._restarted(Restart("gate", time.time(), "the gate died", code))
            delay, why = self._gate_crashes.record(failure, now, port_pinned=True)
            if delay is None:
                raise HomelabError(f"{why}{failure.message}", title="Gate crash loop")
            self._gate_back_at = now + delay
            logger.warning("the gate died: starting it again in %.1f s", delay)
        if now < self._gate_back_at or supervisor.state is not State.READY:
            return
        self._gate_back_at = None
        facts = supervisor.spec.facts
        gate.restart(supervisor.url or "", facts, supervisor.pid, supervisor.spec.api_key)
        logger.info("the gate listens again at %s", gate.url)


class SetKeeper:
    """The keeper's side of a set of models (``serve A B C --detach``): the same process and
    notice as one model's (:func:`launch`, :func:`go_quiet`), keeping the set's gate and its
    engines.

    The set's gate runs on a thread of the keeper (its :class:`~homelab.gate.model_pool.
    ModelPool` loads and unloads the engines), and each engine is spawned with the
    parent-death signal. So a keeper that is killed takes the gate and every engine with it:
    nothing is orphaned, the record's keeper is gone (its start time says so) and the next
    ``serve`` of the set starts it anew. Adopting a set's engines would mean adopting each
    one's key, port and load state into a new pool for engines that a set loads on demand
    anyway: the residents' reload is the whole cost of starting again.
    """

    def __init__(self) -> None:
        self.restarts: tuple[Restart, ...] = ()
        self.stop_asked = threading.Event()
        self._lock = threading.Lock()
        self.noted: Callable[[tuple[Restart, ...]], None] | None = None
        """Told the restarts after each one (the set's record is rewritten with them)."""

    def crashed(self, model: str, transition: Transition) -> None:
        """A set's engine crashed (its supervisor restarts it): noted, the model named."""
        failure = transition.failure
        why = f"{model}: {'crashed' if failure is None else failure.title}"
        code = None if failure is None else failure.returncode
        with self._lock:
            self.restarts = with_restart(self.restarts, Restart("engine", transition.at, why, code))
            restarts = self.restarts
        logger.warning("restarting %s's engine: %s", model, why)
        if self.noted is not None:
            with contextlib.suppress(OSError):
                self.noted(restarts)

    def keep(self, serving: Callable[[], bool], stop: Callable[[], None]) -> int:
        """Keep the set until SIGTERM (0), or until its gate ended by a fault (the engine's
        exit code, a note left for ``status``); ``stop`` stops the gate and every engine."""
        while not self.stop_asked.wait(WATCH_S):
            if not serving():
                why = "the gate of the set of models ended unasked"
                logger.error("%s: stopping its engines", why)
                with contextlib.suppress(OSError):
                    write_end(KeeperEnd("a set of models", time.time(), why, self.restarts))
                stop()
                return int(ExitCode.ENGINE)
        logger.info("stopping (asked)")
        stop()
        return int(ExitCode.OK)
