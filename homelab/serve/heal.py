"""Heal a plan that was wrong: on an out-of-memory, restart with the next smaller plan.

A :class:`Healer` watches one serve session's llama-server from before its first spawn:

- **at load** (the engine exits with an allocation failure in its load log) and **at run
  time** (a crash whose log says out-of-memory, or a serving engine that logs a request's
  failed allocation, ``decode() failed: std::bad_alloc``, and lives on), it re-plans with
  fewer slots (halved, each keeping its context), then less context per slot (halved),
  through the one planning pass (:meth:`~homelab.serve.session_view.SessionView.prepare`, the options'
  ``slots``/``ctx`` set), and hands the smaller command line to the supervisor, which restarts into it
  (:meth:`~homelab.engine.supervision.supervisor.Supervisor.respec`; a live engine's
  restart is asked for, not a crash, so heal steps never make a crash loop);
- the prompt cache's failed copy is said (``PromptCacheOff``), not healed (it serves on);
- **in the launch proof** (:mod:`homelab.serve.prove`, run by :meth:`Healer.ready`
  after ready and before the session announces it) the same, when the proof's request saw
  an out-of-memory;
- at most :data:`MAX_STEPS` steps, then a clear :class:`HealError` naming what was tried;
- once a smaller plan held (ready, and proved when the proof is on), the miss goes into
  the calibration store (:func:`homelab.plan.calibration_miss.record_miss`) so the next
  plan of that model on that card starts there.

It says what happened and what changed as ``Healing``/``Healed``/``Proving``/``Proved``
session events. Only a kind that reads its out-of-memory lines (``EngineKind.oom``) is
healed; an adopted engine has no plan here.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine.supervision.attempt_log import LogLine
from homelab.engine.supervision.states import State, Transition
from homelab.errors import DoesNotFitError, EngineError, HomelabError
from homelab.serve import events as ev

if TYPE_CHECKING:
    from homelab.engine.kinds import OomReading, ServePlan
    from homelab.engine.supervision.supervisor import Supervisor
    from homelab.plan.calibration_miss import Setting
    from homelab.plan.options import PlanOptions
    from homelab.serve.prove import ProofResult
    from homelab.serve.session_view import SessionView

MAX_STEPS = 4
"""Smaller plans tried after an out-of-memory before giving up (below the crash-loop limit)."""
MIN_CTX_PER_SLOT = 512
"""Less context per slot than this is not worth serving: give up instead."""
PROOF_TIMEOUT_S = 900.0
HEALED, ALREADY, GAVE_UP = "healed", "already", "gave up"
"""What :meth:`Healer._heal` did."""


class HealError(DoesNotFitError):
    """Every smaller plan tried ran out of memory too (or none was left to try)."""

    title = "Out of memory, not healed"


def smaller(setting: Setting) -> tuple[int, int] | None:
    """(slots, total context) of the next smaller plan: half the slots (each keeps its
    context), then half the context of the one slot; None when nothing smaller is worth it."""
    if setting.slots > 1:
        slots = setting.slots // 2
        return slots, slots * setting.ctx_per_slot
    per_slot = setting.ctx_per_slot // 2 // 256 * 256
    if per_slot < MIN_CTX_PER_SLOT:
        return None
    return 1, per_slot


def wants_proof(session: SessionView) -> bool:
    """The proof setting, or its default: on for a plan on a real card, off for a CPU plan
    (and for a synthetic or recorded card: there is no card memory to watch)."""
    options, plan = session.request.options, session.plan
    if options.serve.prove is not None:
        return options.serve.prove
    real_card = options.card.vram is None and options.card.gpu_snapshot is None
    return real_card and plan is not None and bool(getattr(plan.plan, "on_gpu", False))


def attach_healer(session: SessionView, supervisor: Supervisor) -> Healer | None:
    """A healer for ``supervisor`` when the session planned an engine of a kind that heals
    (one whose out-of-memory lines it reads); else None."""
    plan, oom = session.plan, session.kind.oom
    if plan is None or session.adopted is not None or oom is None:
        return None
    return Healer(session, supervisor, oom)


class Healer:
    """Proves and heals one session's engine (see the module docstring)."""

    def __init__(self, session: SessionView, supervisor: Supervisor, oom: OomReading) -> None:
        self.session = session
        self.supervisor = supervisor
        self.oom = oom
        self.options = session.request.options
        self.failed: list[Setting] = []
        self.stage: str | None = None
        self.said: str | None = None
        self.gave_up: HealError | None = None
        self.proving = False
        self._healed_attempts: set[int] = set()
        self._serving: set[int] = set()
        """Attempts announced (ready, and proved when the proof is on): their out-of-memory
        lines are run time. An attempt in its proof is the proof's, never the line's."""
        self._cache_said: set[int] = set()
        self._lock = threading.Lock()
        supervisor.subscribe(self._changed)
        supervisor.subscribe(self._line, log_lines=True)

    @property
    def plan(self) -> ServePlan:
        """The plan the engine runs (the session's: a heal or a re-plan moves it)."""
        plan = self.session.plan
        assert plan is not None, "a healer is attached to a planned engine"
        return plan

    def replanned(self, options: PlanOptions) -> None:
        """The engine was re-planned with ``options``: a later heal shrinks from these."""
        self.options = options

    # -- the supervisor's transitions (on its run-loop thread) -------------------------------

    def _changed(self, transition: Transition) -> None:
        attempt = transition.attempt
        if transition.state is State.CRASHED:
            lines = self.supervisor.attempt_lines()
            if self.oom.is_oom(transition.failure, lines):
                stage = (
                    "proof"
                    if self.proving
                    else "run"
                    if self._serving  # announced once: a later crash is a run-time one
                    else "load"
                )
                if self._heal(stage, attempt, self._said(transition, lines)) == GAVE_UP:
                    self.supervisor.stop()  # on the run loop's thread: it does not wait
        elif transition.state is State.READY:
            if self._serving or not wants_proof(self.session):
                self._serving.add(attempt)  # no proof to wait for: its lines are run time
            if self._serving and self.failed and self.stage == "run":
                self._record()  # a run-time heal held (the front-end is watching, not proving)

    def _line(self, item: Transition | LogLine) -> None:
        """An engine line (on this subscription's own thread). A serving attempt that logs
        a failed allocation that cost it a request (``decode() failed: std::bad_alloc``:
        the CPU graph's work buffer, grown lazily on the first big batch, could not grow)
        ran out at run time: heal it, the loop restarting it on the smaller plan now. The
        prompt cache's failure is said (:class:`~homelab.serve.events.PromptCacheOff`),
        not healed: the engine drops the cache and serves on."""
        if not isinstance(item, LogLine):
            return
        strip_prefix = self.oom.strip_prefix
        if self.oom.prompt_cache_line(item.text):
            if item.attempt not in self._cache_said:
                self._cache_said.add(item.attempt)
                self.session.emit(
                    ev.PromptCacheOff(strip_prefix(item.text), self.plan.cache_ram_mib)
                )
            return
        if item.attempt not in self._serving or not self.oom.heal_line(item.text):
            return
        if self.supervisor.events[-1].attempt != item.attempt:
            return  # a line of an attempt that is gone already (read late)
        outcome = self._heal("run", item.attempt, strip_prefix(item.text))
        if outcome == HEALED:
            self.supervisor.respec(self.supervisor.spec, restart=True)
        elif outcome == GAVE_UP:
            self.supervisor.stop()

    def _heal(self, stage: str, attempt: int, said: str) -> str:
        """Plan smaller and hand it to the supervisor: HEALED; ALREADY when ``attempt`` was
        healed before; GAVE_UP (:attr:`gave_up` says why; the caller stops the engine)."""
        with self._lock:
            if attempt in self._healed_attempts:
                return ALREADY
            from homelab.plan.calibration_miss import setting_of

            self._healed_attempts.add(attempt)
            was = setting_of(self.plan.plan)
            self.failed.append(was)
            self.stage = self.stage or stage
            self.said = self.said or said
            step = len(self.failed)
            try:
                nxt = self._smaller_plan(was, step)
            except HomelabError as error:
                self.gave_up = HealError(
                    f"{self._tried()}; {error.message}", hint=error.hint, title=error.title
                )
                nxt = None
            if nxt is None:
                return GAVE_UP
            # The gate in front takes the healed plan's budget and ceiling now, before the
            # smaller engine is back (at load and in the proof it starts later, from the
            # healed spec's facts).
            argv = self.session.restart_into(nxt, now=False, retarget=stage == "run").argv
            now = setting_of(nxt.plan)
            self.session.emit(ev.Healing(stage, said, was, now, step, MAX_STEPS, argv))
            return HEALED

    def _smaller_plan(self, was: Setting, step: int) -> ServePlan | None:
        if step > MAX_STEPS:
            self.gave_up = HealError(
                f"{self._tried()}: still out of memory after {MAX_STEPS} smaller plans",
                hint="set a smaller `ctx` or `slots`, raise the `engine memory limit`, "
                "or close programs that use the memory",
            )
            return None
        target = smaller(was)
        if target is None:
            self.gave_up = HealError(
                f"{self._tried()}: nothing smaller is worth serving "
                f"(one slot of {MIN_CTX_PER_SLOT} tokens is the least)",
                hint="raise the `engine memory limit`, pick a smaller quant, "
                "or close programs that use the memory",
            )
            return None
        slots, ctx = target
        options = self.options.pinned(ctx=ctx, slots=slots)
        return self.session.prepare(options, self.session.request.report).plan

    def _said(self, transition: Transition, lines: list[str]) -> str:
        """The engine's own out-of-memory line (prefix stripped)."""
        failure, oom = transition.failure, self.oom
        found = oom.oom_lines(lines) or oom.oom_lines(failure.quoted if failure else ())
        return oom.strip_prefix(found[0]) if found else (failure.title if failure else "?")

    def _tried(self) -> str:
        tried = ", ".join(s.describe() for s in self.failed)
        return f"llama-server ran out of memory ({self.stage}: {self.said}) at {tried}"

    # -- the session's wait for ready (front-end thread) ------------------------------------

    def ready(self) -> Transition:
        """Wait until the engine is ready (healing on the way), prove it when asked (healing
        an out-of-memory in the proof), record a heal; the READY transition.

        Raises:
            HealError: out of memory, and no smaller plan held.
            HomelabError: it failed otherwise (the supervisor's explained failure).
        """
        prove_it = wants_proof(self.session)
        after: int | None = None
        while True:
            try:
                ready = self.supervisor.wait_ready(after=after)
            except HomelabError:
                if self.gave_up is not None:
                    raise self.gave_up from None
                raise
            if not prove_it:
                break
            result = self._prove(ready)
            if result.ok:
                break
            if not self._still_up(ready.attempt):
                continue  # it crashed in the proof: healed (out of memory) or restarted as it was
            if result.oom is None:
                raise EngineError(
                    f"the launch proof failed: {result.error}",
                    hint="serve without the proof (`prove` off) to skip it; the log says more",
                )
            outcome = self._heal("proof", ready.attempt, self.oom.strip_prefix(result.oom))
            if outcome == GAVE_UP:
                self.supervisor.stop()
            elif outcome == HEALED:
                self.supervisor.respec(self.supervisor.spec, restart=True)
                after = ready.attempt  # the next ready is the restart's, not this one
        self._serving.add(ready.attempt)
        if self.failed:
            self._record()
        return ready

    def _still_up(self, attempt: int, settle_s: float = 3.0) -> bool:
        """True when the attempt that failed its proof is still the one serving after
        ``settle_s`` (an engine that ran out of memory may take a moment to die)."""
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            if attempt in self._healed_attempts or self.supervisor.state is not State.READY:
                return False
            time.sleep(0.1)
        return (
            self.supervisor.state is State.READY and self.supervisor.events[-1].attempt == attempt
        )

    def _prove(self, ready: Transition) -> ProofResult:
        from homelab.plan.calibration_miss import predicted_bytes
        from homelab.serve.prove import prove, save_launch

        plan = self.plan.plan
        session = self.session
        self.proving = True
        try:
            result = prove(
                ready.url or self.supervisor.url or "",
                self.supervisor,
                pid=ready.pid,
                gpu=plan.budget.name if plan.on_gpu else None,
                predicted_bytes=predicted_bytes(plan),
                timeout_s=PROOF_TIMEOUT_S,
                heal_line=self.oom.heal_line,
                on_start=lambda slot, tokens, ctx: session.emit(ev.Proving(slot, tokens, ctx)),
                api_key=self.supervisor.spec.api_key,
            )
        finally:
            self.proving = False
        save_launch(ready.pid, proof=result.as_dict())
        session.emit(ev.Proved(result))
        return result

    # -- the calibration store ---------------------------------------------------------------

    def _record(self) -> None:
        """The miss into the calibration store, the heal into the launch file; ``Healed``."""
        from dataclasses import asdict

        from homelab.engine.llamacpp.locate import engine_version
        from homelab.plan.calibration import CalibrationError
        from homelab.plan.calibration_key import model_identity
        from homelab.plan.calibration_miss import miss_key, record_miss, setting_of
        from homelab.serve.prove import save_launch

        failed, worked = tuple(self.failed), setting_of(self.plan.plan)
        stage, said = self.stage or "load", self.said or ""
        self.failed, self.stage, self.said = [], None, None  # a later heal starts afresh
        version = engine_version(Path(self.supervisor.spec.argv[0]))
        why_not: str | None = None
        if version is None or self.plan.model is None:
            why_not = "the engine's version is unknown" if version is None else "no model header"
        else:
            key = miss_key(
                self.plan.plan,
                model_identity(self.plan.model),
                version,
                self.options.engine.memory_limit,
            )
            try:
                record_miss(key, failed, worked, stage=stage, said=said)
            except CalibrationError as error:
                why_not = error.message
        healed = {
            "stage": stage,
            "said": said,
            "failed": [asdict(s) for s in failed],
            "worked": asdict(worked),
            "recorded": why_not is None,
        }
        save_launch(self.supervisor.pid, healed=healed)
        self.session.emit(ev.Healed(failed, worked, why_not is None, why_not))


def ended_error(healer: Healer | None, supervisor: Supervisor) -> HomelabError | None:
    """Why a supervisor that ended on its own ended: the heal's :class:`HealError` when it
    gave up (no smaller plan held), else the supervisor's explained failure; None: asked."""
    if healer is not None and healer.gave_up is not None:
        return healer.gave_up
    failure = supervisor.failure
    return None if failure is None else failure.to_error()
