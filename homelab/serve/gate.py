"""The admission gate as a part of a serve session: on the public port, in front of the engine.

With a gate the engine listens on an internal loopback port (the first free one above
the public port, chosen like any engine port, then pinned so a restart keeps it where the
gate sends requests) and the gate takes the public port (the serve's ``port``, moved to
the next free one unless the person pinned it). The public port is looked at *before*
the engine is spawned (a pinned port that is taken fails with nothing started), and
the gate starts once the engine is ready: its default budget comes from what the
engine really allocated. If the gate still cannot listen then, the engine is stopped:
never an engine left without the gate that was asked for.

Where the gate runs follows the engine: an engine that dies with this process has its
gate on a thread here (:class:`~homelab.gate.runner.GateRunner`); a detached engine,
which outlives this process, has its gate in a detached process of its own
(:mod:`homelab.serve.gate_process`, the same runner), which ends when the
engine's record goes (``homelab stop``, a replace) or on SIGTERM. The engine record
names the gate (``gate_url``, ``gate_budget_tokens``, its pid), so the next ``serve``
adopts both and ``homelab status`` shows both. The gate's API key is never in it; the
engine's own key is (:mod:`homelab.engine.engine_key`; the state file is 0600).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from homelab.engine.supervision.ports import LOOPBACK, PortChoice, choose_port, port_is_free
from homelab.engine.supervision.process import alive, create_time_of
from homelab.errors import EngineError
from homelab.serve import events as ev
from homelab.serve.events import SessionEvent

if TYPE_CHECKING:
    from homelab.engine.supervision.facts import PlanFacts
    from homelab.engine.supervision.record import EngineRecord
    from homelab.engine.supervision.state_file import StateFile
    from homelab.gate.config_file import GateChoices
    from homelab.gate.runner import GateRunner
    from homelab.gate.settings import GateSettings
    from homelab.serve.gate_process import GateChild

STOP_GRACE_S = 5.0
"""How long a gate process gets after SIGTERM before SIGKILL."""
PORT_FREED_S = 10.0
"""How long a replaced engine's gate may take to give its port back."""
GATE_FIELDS = ("gate_url", "gate_budget_tokens", "gate_max_tokens", "gate_pid", "gate_create_time")
"""The engine record's fields that name its gate."""


class SessionGate:
    """One session's gate: its settings, its port, its runner or process, its record fields."""

    def __init__(
        self, choices: GateChoices, store: StateFile, emit: Callable[[SessionEvent], None]
    ):
        self._choices = choices
        self._store = store
        self._emit = emit
        self.settings: GateSettings | None = None
        self.public: PortChoice | None = None
        self.url: str | None = None
        self.ceiling: int | None = None
        """The per-request ceiling (the record's ``gate_budget_tokens``)."""
        self._runner: GateRunner | None = None
        self._child: GateChild | None = None
        self._adopted: tuple[int, float] | None = None
        self._fields: dict[str, object] = {}
        self._facts: PlanFacts | None = None
        """The plan facts the gate admits by."""
        self._life = threading.Lock()
        """Held by :meth:`start` and :meth:`stop`: a stop that comes while the gate is being
        spawned waits for it, then stops it; a gate asked to start after a stop does not."""
        self._stopped = False
        self.repairing = False
        """The adopted engine's gate is gone: this serve starts it again on its port."""

    # -- before the engine -------------------------------------------------------------------

    def resolve(self, wanted_port: int) -> None:
        """Settings (gate.toml under the serve's own), the key when one is needed.

        Raises:
            UsageError: a setting is out of range (named, with its file).
        """
        from homelab.gate.config_file import resolve_gate

        resolved = resolve_gate(self._choices, wanted_port)
        self.settings = resolved.settings
        if resolved.key_created is not None and resolved.settings.api_key is not None:
            self._emit(ev.GateKeyCreated(str(resolved.key_created), resolved.settings.api_key))
        from homelab.gate.requests import ANTHROPIC_SAMPLING
        from homelab.gate.sampling import unreachable

        note = unreachable(resolved.settings.sampling, ANTHROPIC_SAMPLING)
        if note is not None:
            self._emit(ev.GateSamplingNote(note))

    def reserve(self, wanted: int, *, pinned: bool) -> PortChoice:
        """The public port (looked at now, taken when the gate starts); the engine's loopback
        port behind it (the first free one above it).

        Raises:
            EngineError: a pinned public port is taken (nothing was started).
        """
        settings = self._need()
        self.public = choose_port(settings.host, wanted, pinned=pinned)
        public = self.public.port
        self.settings = replace(settings, port=public)
        return choose_port(LOOPBACK, public + 1 if public < 65535 else 1024, pinned=False)

    # -- after the engine is ready ----------------------------------------------------------

    def start(
        self,
        engine_url: str,
        facts: PlanFacts | None,
        engine_pid: int | None,
        *,
        detached: bool,
        key: str | None = None,
    ) -> None:
        """Start the gate in front of ``engine_url`` (here, or in a detached process), sending
        ``key`` (the engine's own; None: it has none) on every call to the engine.

        Raises:
            HomelabError: it could not listen (its port was taken meanwhile).
        """
        with self._life:
            if self._stopped:  # a stop came first: no gate for a stopped engine
                return
            settings = self._need()
            self._facts = facts
            if detached:
                from homelab.serve.gate_process import spawn_gate

                child = spawn_gate(settings, engine_url, facts, self._store.path, key)
                self._child = child
                self.url, self.ceiling, budget = child.url, child.ceiling, child.budget
                limit, pid, created = child.max_concurrent, child.pid, child.create_time
            else:
                from homelab.gate.log_file import log_to_terminal
                from homelab.gate.runner import GateRunner

                log_to_terminal()  # its errors: one line each, rate-limited, never a flood
                runner = GateRunner(settings, engine_url, facts, key)
                self.url = runner.start()
                self._runner = runner
                state = runner.state()
                self.ceiling, budget = state.ceiling_tokens, state.budget_tokens
                limit = state.max_concurrent
                pid, created = os.getpid(), create_time_of(os.getpid())
            fields = (self.url, self.ceiling, settings.max_tokens_cap, pid, created)
            self._fields = dict(zip(GATE_FIELDS, fields, strict=True))
            self.stamp(engine_pid)
            self._emit(ev.GateStarted(self.url, budget, limit, engine_url, detached, self.ceiling))

    def adopt(self, record: EngineRecord) -> None:
        """Take the adopted engine's gate as it runs, or say it has none."""
        if record.gate_alive() and record.gate_pid != record.supervisor_pid:
            assert record.gate_url is not None and record.gate_pid is not None
            assert record.gate_create_time is not None
            self.url, self.ceiling = record.gate_url, record.gate_budget_tokens
            self._adopted = (record.gate_pid, record.gate_create_time)
            self._facts = record.facts
            self._fields = {name: getattr(record, name) for name in GATE_FIELDS}
            self._emit(ev.GateAdopted(record.gate_url, record.gate_budget_tokens))
            return
        if record.gate_url is None:
            self._emit(ev.GateMissing("it was started without one (`no_gate`)"))
            return
        self._store.update(record.pid, **dict.fromkeys(GATE_FIELDS))
        if self.settings is None:  # this serve asked for no gate: the engine is served bare
            self._emit(ev.GateMissing(f"its gate at {record.gate_url} is gone"))
            return
        # the gate died (killed, crashed): it starts again where clients find it
        self.settings = replace(self.settings, port=record.public_port)
        self.repairing = True
        self._emit(ev.GateRepairing(record.gate_url))

    def stamp(self, engine_pid: int | None) -> None:
        """Name the gate in the record of engine ``engine_pid`` (again after each restart)."""
        if engine_pid is not None and self._fields:
            with contextlib.suppress(OSError):
                self._store.update(engine_pid, **self._fields)

    def retarget(self, facts: PlanFacts | None) -> ev.GateRetargeted | None:
        """The engine restarted on another plan (its ``facts``; None: the engine's ``/props``
        say): the gate takes the new max_concurrent and token budget on its live queue —
        queued requests keep their place, admitted ones their charge, and a queued one now
        larger than a request may be is refused (413 ``too_large``). The record's ceiling
        follows. A detached gate follows the record's facts by itself. Says so
        (``GateRetargeted``, also returned; None when no gate runs yet)."""
        from homelab.gate.limits import resolve_limits

        self._facts = facts
        runner = self._runner
        if runner is not None:
            limits = runner.retarget(facts)
        elif self.running and self.settings is not None:  # a gate process: the same limits
            limits = resolve_limits(self.settings, facts, None)
        else:
            return None
        if limits is None:
            return None
        if self._fields:
            self.ceiling = limits.ceiling_tokens
            self._fields["gate_budget_tokens"] = self.ceiling
        said = ev.GateRetargeted(limits.budget_tokens, limits.max_concurrent, limits.ceiling_tokens)
        self._emit(said)
        return said

    def changed(self, state: str, engine_pid: int | None) -> None:
        """The engine's state changed: a (re)start writes a new record, which must name the
        gate; a restart that is ready may run on another plan: when its record names other
        plan facts than the gate has, :meth:`retarget` to them, then re-stamp."""
        if state == "starting":
            self.stamp(engine_pid)
        elif state == "ready" and engine_pid is not None and self.running:
            with contextlib.suppress(OSError):
                record = self._store.read()
                if record is not None and record.pid == engine_pid and record.facts != self._facts:
                    self.retarget(record.facts)
                    self.stamp(engine_pid)

    def exited(self) -> tuple[bool, int | None]:
        """(the gate process this session holds has died, its exit code when known): a
        keeper's look; a gate on a thread here, or none, has not."""
        child, adopted = self._child, self._adopted
        if child is not None and child.proc.poll() is not None:
            return True, child.proc.returncode
        if adopted is not None and not alive(*adopted):
            return True, None
        return False, None

    def restart(
        self, engine_url: str, facts: PlanFacts | None, engine_pid: int | None, key: str | None
    ) -> None:
        """Start the gate process again where clients find it (its public port), after it died.

        Raises:
            HomelabError: it could not listen again.
        """
        with self._life:
            if self._stopped or self.url is None:
                return
            self._child = self._adopted = None
            port = int(self.url.rsplit(":", 1)[1])
            self.settings = replace(self._need(), port=port)
        self.start(engine_url, facts, engine_pid, detached=True, key=key)

    @property
    def running(self) -> bool:
        """True while this session holds a gate (its own or an adopted one)."""
        return self._runner is not None or self._child is not None or self._adopted is not None

    # -- the end -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the gate this session holds (idempotent; for good: it is not started again)."""
        with self._life:
            self._stopped = True
            runner, child, adopted = self._runner, self._child, self._adopted
            self._runner = self._child = self._adopted = None
        if runner is not None:
            runner.stop()
        if child is not None:
            stop_gate_process(child.pid, child.create_time)
            child.proc.wait()  # reaped: it is this process's child
        if adopted is not None:
            stop_gate_process(*adopted)
        if (runner or child or adopted) and self.url is not None:
            self._emit(ev.GateStopped(self.url))

    def let_go(self) -> None:
        """Leave a detached gate running (it follows its engine's record); a gate on a thread
        here cannot outlive this process and is stopped."""
        if self._runner is not None:
            self.stop()
        if self._child is not None:
            self._child.let_go()
        self._child = self._adopted = None

    def _need(self) -> GateSettings:
        if self.settings is None:
            raise RuntimeError("the gate's settings were not resolved")
        return self.settings


def stop_gate_process(pid: int, create_time: float | None, grace_s: float = STOP_GRACE_S) -> bool:
    """SIGTERM a detached gate process (verified by its start time, when known), SIGKILL
    after ``grace_s``; True when it was running."""
    if not alive(pid, create_time):
        return False
    for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if not alive(pid, create_time):
                return True
            time.sleep(0.05)
    return not alive(pid, create_time)


def stop_recorded_gate(record: EngineRecord) -> bool:
    """Stop the record's gate when it runs in a process of its own (a detached gate); a gate
    on a supervising homelab's thread ends with that homelab's session. True when stopped."""
    from homelab.engine.supervision.ownership import stop_keeper

    stop_keeper(record)  # first: a keeper would start the gate again
    if record.gate_pid is None or record.gate_create_time is None:
        return False
    if record.gate_pid in (record.supervisor_pid, os.getpid()):
        return False
    return stop_gate_process(record.gate_pid, record.gate_create_time)


def wait_port_freed(record: EngineRecord, timeout_s: float = PORT_FREED_S) -> None:
    """After a replace: wait until the old gate's port is free again (its homelab lets go of
    it as its session sees the engine stopped)."""
    if record.gate_url is None:
        return
    rest = record.gate_url.removeprefix("http://")
    host, _, port = rest.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if port_is_free(host.strip("[]"), int(port)):
                return
        except EngineError:
            return
        time.sleep(0.05)
