"""One ``serve``: pull (if needed) → plan → start, adopt or replace → ready → actuals → live.

The plan is the request's :class:`~homelab.serve.prepare.Prepared` when the front-end hands
one (it is never planned again), else the session prepares the model itself.

:class:`ServeSession` does the work and prints nothing: it publishes the events of
:mod:`homelab.serve.events` (on an :class:`~homelab.serve.bus.EventBus`,
so subscribers never block it) and raises the same :class:`~homelab.errors.HomelabError`
it publishes as ``Failed``. A front-end calls :meth:`ServeSession.start`,
:meth:`ServeSession.wait_ready`, then watches the engine until it ends and calls
:meth:`ServeSession.finish` (or :meth:`ServeSession.run` does all of it, e.g. on a TUI
worker thread); :meth:`ServeSession.stop` and :meth:`ServeSession.let_go` end it early.

Adopt, replace or refuse is decided in the domain
(:func:`homelab.engine.supervision.ownership.decide`), with the settings the person asked for.

With ``ServeRequest.gate`` the admission gate is part of the session
(:mod:`homelab.serve.gate`): it takes the public port, the engine an internal one,
and it starts once the engine is ready and stops when the session stops the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from homelab.engine.engine_key import new_engine_key
from homelab.engine.kinds import KINDS, EngineKind, ServePlan, engine_kind
from homelab.engine.supervision.ownership import Running, decide, running, stop_engine, stop_found
from homelab.engine.supervision.ports import LOOPBACK, choose_port
from homelab.engine.supervision.readiness import EngineProfile
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.states import EngineSpec, RestartPolicy, State, Transition
from homelab.engine.supervision.supervisor import Supervisor
from homelab.errors import HomelabError
from homelab.gpu.report import GpuReport
from homelab.plan.options import PlanOptions
from homelab.plan.workload import Workload
from homelab.serve import events as ev
from homelab.serve.bus import EventBus
from homelab.serve.events import SessionEvent
from homelab.serve.gate import SessionGate, stop_recorded_gate, wait_port_freed
from homelab.serve.heal import Healer, attach_healer, ended_error
from homelab.serve.model_ref import resolve_model
from homelab.serve.prepare import Prepared, prepare
from homelab.serve.request import ServeRequest
from homelab.serve.session_view import Restarted


class ServeSession:
    """One serve, from plan to stop (see the module docstring). Not reusable."""

    def __init__(
        self,
        request: ServeRequest,
        *,
        store: StateFile | None = None,
        policy: RestartPolicy | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.request = request
        self.kind: EngineKind = engine_kind(request.options.engine.name)
        self.store = store or StateFile()
        self.bus = EventBus()
        self.supervisor: Supervisor | None = None
        self.plan: ServePlan | None = None
        """The plan the engine runs (a heal or a re-plan replaces it); None when adopted."""
        self.adopted: EngineRecord | None = None
        self._policy, self._log_dir = policy, log_dir
        self.default_workload: Workload | None = request.default_workload
        """The workload when the options ask for none (a preset's hint, once resolved)."""
        self.served_name: str | None = None
        """A served preset's key: the id the engine serves it by (kept by a re-plan)."""
        self._asked_stop = False
        self.gate: SessionGate | None = None
        self.healer: Healer | None = None  # proves a planned engine and heals an out-of-memory
        if request.gate is not None:
            self.gate = SessionGate(request.gate, self.store, self.emit)

    # -- subscribing -------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Every later event to ``callback``, in order, on a thread of its own."""
        return self.bus.subscribe(callback)

    @property
    def events(self) -> list[SessionEvent]:
        """Every event so far."""
        return list(self.bus.history)

    def emit(self, event: SessionEvent) -> None:
        """Publish ``event`` to every subscriber (the session's collaborators say theirs)."""
        self.bus.publish(event)

    def _failed(self, error: HomelabError) -> HomelabError:
        self.emit(ev.Failed(error))
        return error

    def prepare(self, options: PlanOptions, report: GpuReport | None) -> Prepared:
        """The running model planned anew with ``options`` on ``report`` (None: the card read
        now): a heal's smaller plan, a re-plan."""
        assert self.plan is not None, "only a planned engine is planned again"
        model = self.plan.model_path
        return prepare(
            model,
            report,
            options,
            default_workload=self.default_workload,
            served_name=self.plan.served_name,
        )

    def restart_into(self, plan: ServePlan, *, now: bool, retarget: bool = True) -> Restarted:
        """Hand ``plan`` to the supervisor (the engine's port and program kept); the session's
        plan follows.

        ``now``: end the running engine at once so the supervisor restarts into the plan (else
        from its next restart on, e.g. after a crash). ``retarget``: give the gate the plan's
        limits now (a gate that starts later takes them from the spec's facts).
        """
        supervisor = self._need()
        spec = supervisor.spec
        argv = tuple(self.kind.argv(plan, spec.port, spec.argv[0]))
        supervisor.respec(replace(spec, argv=argv, facts=plan.facts), restart=now)
        self.plan = plan
        gate = None
        if retarget and self.gate is not None:
            gate = self.gate.retarget(plan.facts)
        return Restarted(argv, gate)

    # -- the steps ---------------------------------------------------------------------------

    def start(self) -> Supervisor:
        """Resolve (pull), decide, then start a planned engine or adopt the running one.

        Returns once the engine runs (not yet ready).

        Raises:
            HomelabError: the model, the plan, the decision or the spawn failed.
        """
        try:
            if self.gate is not None:
                self.gate.resolve(self._wanted_port())
            model = self._resolve()
            with self.store.claim():
                now = running(self.store)
                for aside in now.set_aside:
                    self.emit(ev.SetAsideNotice(aside))
                decision = decide(
                    now, model, asked=self.request.asked(), replace=self.request.replace
                )
                if decision == "adopt":
                    assert now.record is not None
                    return self._adopt(now.record)
                if decision == "replace":
                    self._replace(now)
                return self._start_planned(model)
        except HomelabError as error:
            raise self._failed(error) from None

    def _resolve(self) -> str:
        """The model to serve, pulled into the HF cache when the kind pulls and it is not local."""
        if not self.kind.pulls:
            return self.request.model
        path, workload, self.served_name = resolve_model(self.request.model, self.kind, self.emit)
        if workload is not None:
            self.default_workload = workload
        return path

    def _wanted_port(self) -> int:
        port = self.request.options.engine.port
        return port if port is not None else self.kind.default_port

    def _start_planned(self, model: str) -> Supervisor:
        options, kind = self.request.options, self.kind
        executable = kind.executable()
        pinned = options.engine.port is not None
        wanted = self._wanted_port()
        if self.gate is not None:  # the gate's port is the public one; the engine's internal
            choice = self.gate.reserve(wanted, pinned=pinned)
            note = None if self.gate.public is None else self.gate.public.note()
            pinned = True  # a restart must come back where the gate sends requests
        else:
            choice = choose_port(LOOPBACK, wanted, pinned=pinned)
            note = choice.note()
        prepared = self.request.prepared
        if prepared is None:
            report, workload = self.request.report, self.default_workload
            prepared = prepare(
                model, report, options, default_workload=workload, served_name=self.served_name
            )
        plan = self.plan = prepared.plan
        argv = kind.argv(plan, choice.port, executable)
        self.emit(ev.Planned(plan, tuple(argv), note))
        spec = EngineSpec(
            argv=tuple(argv),
            model=plan.model_path,
            host=LOOPBACK,
            port=choice.port,
            port_pinned=pinned,
            detached=self.request.detach,
            start_timeout_s=self.request.start_timeout_s,
            facts=plan.facts,
            memory_limit=options.engine.memory_limit,
            api_key=None if self.gate is None else new_engine_key(),  # the gate's alone
        )
        supervisor = self._supervisor(spec, kind.profile(plan, plan.model_path))
        self.emit(ev.Starting(kind.name, kind.program))
        supervisor.start()
        moved = supervisor.port_choice
        port = spec.port if moved is None else moved.port
        self.emit(ev.Started(supervisor.pid, supervisor.log_path, spec.port, port))
        return supervisor

    def _adopt(self, record: EngineRecord) -> Supervisor:
        kind = engine_kind(record.engine)
        profile = kind.profile(None, record.model)
        record = self.store.with_key(record, profile.key_env)  # a record that lost it
        spec = EngineSpec(
            argv=record.argv,
            model=record.model,
            host=LOOPBACK,
            port=record.port,
            port_pinned=True,
            detached=record.detached,
            start_timeout_s=self.request.start_timeout_s,
            facts=record.facts,
            api_key=record.api_key,  # a restart keeps the key its gate (and status) hold
        )
        supervisor = self._supervisor(spec, profile)
        self.emit(ev.Adopting(record, kind.program, time.time() - record.started_at))
        supervisor.adopt(record)
        self.adopted = record
        if self.gate is not None:
            self.gate.adopt(record)
        return supervisor

    def _replace(self, now: Running) -> None:
        record = now.record
        if record is not None:
            known = KINDS.get(record.engine)
            program = record.engine if known is None else known.program
            self.emit(ev.Replacing(program, record.pid, record.model, record.public_url))
            stop_recorded_gate(record)
            stop_engine(self.store, record)
            wait_port_freed(record)
        for found in now.unrecorded:
            self.emit(ev.Replacing(Path(found.cmdline[0]).name, found.pid, None, None))
            stop_found(found)

    def _supervisor(self, spec: EngineSpec, profile: EngineProfile) -> Supervisor:
        supervisor = Supervisor(
            spec, profile, policy=self._policy, state_file=self.store, log_dir=self._log_dir
        )
        supervisor.subscribe(self._changed)
        self.supervisor, self.healer = supervisor, attach_healer(self, supervisor)
        return supervisor

    def _changed(self, transition: Transition) -> None:
        if self.gate is not None:  # a restart: its record names the gate; another plan: limits
            self.gate.changed(transition.state.value, transition.pid)
        self.emit(ev.EngineChanged(transition))

    def wait_ready(self) -> None:
        """Wait until it answers; then predicted vs actual, calibration, and (detached) let go.

        Raises:
            HomelabError: it stopped instead, explained.
        """
        supervisor = self._need()
        try:
            ready = supervisor.wait_ready() if self.healer is None else self.healer.ready()
        except HomelabError as error:
            raise self._failed(error) from None
        self.emit(ev.Ready(ready.url or "", ready.pid, supervisor.profile.name, ready.reason))
        if self.plan is not None:
            measured = self.kind.measure(
                self.plan, supervisor.attempt_lines(), supervisor.spec.argv[0]
            )
            if measured is not None:
                self.emit(ev.Actuals(measured))
        if self.gate is not None and (self.adopted is None or self.gate.repairing):
            adopted = self.adopted
            detached = self.request.detach or (adopted is not None and adopted.detached)
            try:
                facts = self.kind.served_facts(supervisor.spec.facts, supervisor.attempt_lines())
                key = supervisor.spec.api_key
                self.gate.start(ready.url or "", facts, ready.pid, detached=detached, key=key)
            except HomelabError as error:  # never an engine of ours left without its gate
                if adopted is None:
                    supervisor.stop()
                raise self._failed(error) from None
        if self.request.detach and not self.request.hold:
            self._release(supervisor, adopted=False)

    @property
    def live(self) -> bool:
        """True while the session supervises a running engine (not released, not ended)."""
        s = self.supervisor
        return s is not None and not s.released and not s.wait_stopped(0)

    def finish(self) -> None:
        """After the supervisor ended on its own: why.

        Raises:
            HomelabError: it gave up (crash loop, a failure that would repeat).
        """
        supervisor = self._need()
        if self.gate is not None:
            self.gate.stop()
        error = ended_error(self.healer, supervisor)  # a heal that gave up says so first
        if error is not None:
            self.emit(ev.Stopped("failed"))
            raise self._failed(error)
        self.emit(ev.Stopped("outside"))

    def run(self) -> None:
        """All of it: start, ready, watch until it ends (or is stopped / let go), finish."""
        try:
            self.start()
            if self._asked_stop:  # stopped while it started: no engine left behind
                self._need().stop()
                return
            self.wait_ready()
        except HomelabError:
            if self._asked_stop:
                return
            raise
        if self.request.detach and not self.request.hold:
            return
        supervisor = self._need()
        supervisor.wait_stopped()
        if not self._asked_stop:  # it ended on its own: say why
            self.finish()

    def stop(self, *, let_go: bool = True) -> None:
        """Stop the engine (or, for a detached one that is ready, leave it running unless
        ``let_go`` is False)."""
        supervisor = self.supervisor
        if supervisor is None:
            return
        self._asked_stop = True
        if let_go and self.let_go():
            return
        if self.gate is not None:
            self.gate.stop()
        supervisor.stop()
        self.emit(ev.Stopped("stopped"))

    def end(self) -> None:
        """After a failure or an interrupt: stop what this session still runs (its gate, a
        live engine), without news; a released engine and its gate are left alone."""
        if self.gate is not None:  # a gate let go with its engine is not held any more
            self.gate.stop()
        if self.live and self.supervisor is not None:
            self.supervisor.stop()

    @property
    def public_url(self) -> str | None:
        """Where clients go: the gate's URL (None until it listens), or the engine's when it
        runs without one (no gate asked, or an adopted engine that has none)."""
        if self.gate is not None and (self.gate.url is not None or self.adopted is None):
            return self.gate.url
        return None if self.supervisor is None else self.supervisor.url

    @property
    def asked_to_stop(self) -> bool:
        """True once :meth:`stop` was called (a failure after it is the stop, not news)."""
        return self._asked_stop

    def let_go(self) -> bool:
        """Leave a detached, ready engine running and end; True if it was let go."""
        supervisor = self.supervisor
        if supervisor is None or not supervisor.spec.detached:
            return False
        if supervisor.state is not State.READY or supervisor.released:
            return False
        self._release(supervisor, adopted=self.adopted is not None)
        return True

    def _release(self, supervisor: Supervisor, *, adopted: bool) -> None:
        """Leave the detached engine (and its gate) running; this session ends."""
        if self.gate is not None:
            self.gate.let_go()
        supervisor.release()
        self.emit(ev.LeftRunning(supervisor.log_path, adopted=adopted))
        self.emit(ev.Stopped("released"))

    def close(self) -> None:
        """Deliver every event still queued; end the delivery threads."""
        self.bus.close()

    def _need(self) -> Supervisor:
        if self.supervisor is None:
            raise RuntimeError("the session has not started")
        return self.supervisor
