"""One ``serve``: plan → pull (if needed) → start, adopt or replace → ready → actuals → live.

:class:`ServeSession` does the work and prints nothing: it publishes the events of
:mod:`homelab.engine.session.events` (on an :class:`~homelab.engine.session.bus.EventBus`,
so subscribers never block it) and raises the same :class:`~homelab.errors.HomelabError`
it publishes as ``Failed``. A front-end calls :meth:`ServeSession.start`,
:meth:`ServeSession.wait_ready`, then watches the engine until it ends and calls
:meth:`ServeSession.finish` (or :meth:`ServeSession.run` does all of it, e.g. on a TUI
worker thread); :meth:`ServeSession.stop` and :meth:`ServeSession.let_go` end it early.

Adopt, replace or refuse is decided in the domain
(:func:`homelab.engine.supervision.ownership.decide`), with the settings the person asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from homelab.engine.kinds import KINDS, EngineKind, ServePlan, engine_kind
from homelab.engine.session import events as ev
from homelab.engine.session.bus import EventBus
from homelab.engine.supervision.facts import Asked
from homelab.engine.supervision.ownership import Running, decide, running, stop_engine, stop_found
from homelab.engine.supervision.ports import LOOPBACK, choose_port
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.states import EngineSpec, RestartPolicy, State
from homelab.engine.supervision.supervisor import Supervisor
from homelab.errors import HomelabError, UsageError
from homelab.gpu.report import GpuReport
from homelab.plan.options import PlanOptions
from homelab.plan.workload import Workload


@dataclass(frozen=True, slots=True)
class ServeRequest:
    """What to serve and how."""

    model: str
    """A .gguf path, a preset name or a Hub reference (llama.cpp); a folder or repo (vLLM)."""
    options: PlanOptions
    detach: bool = False
    """Leave the engine running when the session ends."""
    replace: bool = False
    """Stop a running engine first instead of adopting it or refusing."""
    start_timeout_s: float = 600.0
    hold: bool = False
    """With ``detach``: spawn detached but keep supervising once ready (a TUI); the
    front-end ends with :meth:`ServeSession.let_go` (leave it) or ``stop(let_go=False)``."""
    default_workload: Workload | None = None
    """The workload when none is asked for (a preset's hint, when the model is its path)."""
    report: GpuReport | None = None
    """Plan on this look at the card (a front-end that follows the card's telemetry);
    None: read the card as ``options`` say."""

    def __post_init__(self) -> None:
        if not self.start_timeout_s > 0:
            raise UsageError("The start timeout must be positive.")

    def asked(self) -> Asked:
        """The settings the person set explicitly (they must hold for an adoption)."""
        o = self.options
        return Asked(
            ctx=o.ctx,
            slots=o.slots,
            cache_type_k=None if o.cache_type_k is None else o.type_k,
            cache_type_v=None if o.cache_type_v is None else o.type_v,
            unified=True if o.unified else None,
            port=o.port,
            engine=o.engine,
        )


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
        self.kind: EngineKind = engine_kind(request.options.engine)
        self.store = store or StateFile()
        self.bus = EventBus()
        self.supervisor: Supervisor | None = None
        self.plan: ServePlan | None = None
        self.adopted: EngineRecord | None = None
        self._policy = policy
        self._log_dir = log_dir
        self._default_workload: Workload | None = request.default_workload
        self._asked_stop = False

    # -- subscribing -------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Every later event to ``callback``, in order, on a thread of its own."""
        return self.bus.subscribe(callback)

    @property
    def events(self) -> list[Any]:
        """Every event so far."""
        return list(self.bus.history)

    def _emit(self, event: Any) -> None:
        self.bus.publish(event)

    def _failed(self, error: HomelabError) -> HomelabError:
        self._emit(ev.Failed(error))
        return error

    # -- the steps ---------------------------------------------------------------------------

    def start(self) -> Supervisor:
        """Resolve (pull), decide, then start a planned engine or adopt the running one.

        Returns once the engine runs (not yet ready).

        Raises:
            HomelabError: the model, the plan, the decision or the spawn failed.
        """
        try:
            model = self._resolve()
            with self.store.claim():
                now = running(self.store)
                for aside in now.set_aside:
                    self._emit(ev.SetAsideNotice(aside))
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
        from homelab.gguf.local_path import local_or_ref

        ref = self.request.model
        local = local_or_ref(ref)  # a folder, FIFO or /dev/zero raises its own reason (exit 4)
        if local is not None:
            return str(local.absolute())
        if "/" not in ref:
            from homelab.hub.presets import find_preset

            preset = find_preset(ref)
            if preset.engine != self.kind.name:
                raise UsageError(
                    f"preset {preset.key} runs on {preset.engine}",
                    hint=f"serve {preset.repo} with `engine` {preset.engine}",
                )
            self._default_workload = preset.workload
            self._emit(ev.PresetChosen(preset.key, preset.name, preset.ref))
            ref = preset.ref
        from homelab.hub.download import pull

        pulled = pull(ref, progress=lambda p: self._emit(ev.PullProgress(p)))
        self._emit(ev.Pulled(str(pulled.paths[0]), pulled.note))
        return str(Path(pulled.paths[0]).absolute())

    def _start_planned(self, model: str) -> Supervisor:
        from homelab.plan.card import card_for

        options, kind = self.request.options, self.kind
        executable = kind.executable()
        pinned = options.port is not None
        wanted = options.port if options.port is not None else kind.default_port
        choice = choose_port(LOOPBACK, wanted, pinned=pinned)
        report = self.request.report if self.request.report is not None else card_for(options)
        plan = kind.plan(model, report, options, default_workload=self._default_workload)
        self.plan = plan
        argv = kind.argv(plan, choice.port, executable)
        self._emit(ev.Planned(plan, tuple(argv), choice.note()))
        spec = EngineSpec(
            argv=tuple(argv),
            model=plan.model_path,
            host=LOOPBACK,
            port=choice.port,
            port_pinned=pinned,
            detached=self.request.detach,
            start_timeout_s=self.request.start_timeout_s,
            facts=plan.facts,
        )
        supervisor = self._supervisor(spec, kind.profile(plan, plan.model_path))
        self._emit(ev.Starting(kind.name, kind.program))
        supervisor.start()
        moved = supervisor.port_choice
        self._emit(
            ev.Started(
                supervisor.pid,
                None if supervisor.log_path is None else str(supervisor.log_path),
                spec.port,
                spec.port if moved is None else moved.port,
            )
        )
        return supervisor

    def _adopt(self, record: EngineRecord) -> Supervisor:
        kind = engine_kind(record.engine)
        spec = EngineSpec(
            argv=record.argv,
            model=record.model,
            host=LOOPBACK,
            port=record.port,
            port_pinned=True,
            detached=record.detached,
            start_timeout_s=self.request.start_timeout_s,
            facts=record.facts,
        )
        supervisor = self._supervisor(spec, kind.profile(None, record.model))
        self._emit(ev.Adopting(record, kind.program, time.time() - record.started_at))
        supervisor.adopt(record)
        self.adopted = record
        return supervisor

    def _replace(self, now: Running) -> None:
        record = now.record
        if record is not None:
            known = KINDS.get(record.engine)
            program = record.engine if known is None else known.program
            self._emit(ev.Replacing(program, record.pid, record.model, record.url, record=record))
            stop_engine(self.store, record)
        for found in now.unrecorded:
            self._emit(
                ev.Replacing(Path(found.cmdline[0]).name, found.pid, None, None, found=found)
            )
            stop_found(found)

    def _supervisor(self, spec: EngineSpec, profile) -> Supervisor:
        supervisor = Supervisor(
            spec, profile, policy=self._policy, state_file=self.store, log_dir=self._log_dir
        )
        supervisor.subscribe(lambda t: self._emit(ev.EngineChanged(t)))
        self.supervisor = supervisor
        return supervisor

    def wait_ready(self) -> None:
        """Wait until it answers; then predicted vs actual, calibration, and (detached) let go.

        Raises:
            HomelabError: it stopped instead, explained.
        """
        supervisor = self._need()
        try:
            ready = supervisor.wait_ready()
        except HomelabError as error:
            raise self._failed(error) from None
        self._emit(ev.Ready(ready.url or "", ready.pid, supervisor.profile.name, ready.reason))
        if self.plan is not None:
            measured = self.kind.measure(
                self.plan, supervisor.attempt_lines(), supervisor.spec.argv[0]
            )
            if measured is not None:
                self._emit(ev.Actuals(measured))
        if self.request.detach and not self.request.hold:
            supervisor.release()
            self._emit(ev.LeftRunning(_text(supervisor.log_path), adopted=False))
            self._emit(ev.Stopped("released"))

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
        failure = supervisor.failure
        if failure is not None:
            self._emit(ev.Stopped("failed"))
            raise self._failed(failure.to_error())
        self._emit(ev.Stopped("outside"))

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
        supervisor.stop()
        self._emit(ev.Stopped("stopped"))

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
        supervisor.release()
        self._emit(ev.LeftRunning(_text(supervisor.log_path), adopted=self.adopted is not None))
        self._emit(ev.Stopped("released"))
        return True

    def close(self) -> None:
        """Deliver every event still queued; end the delivery threads."""
        self.bus.close()

    def _need(self) -> Supervisor:
        if self.supervisor is None:
            raise RuntimeError("the session has not started")
        return self.supervisor


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)
