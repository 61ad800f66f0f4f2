"""Restart the running engine: with the same plan (``r``), or re-planned on the card now (``R``).

A mixin of :class:`homelab.ui.app.HomelabApp`.

``r`` restarts with the running plan's context and slots pinned: the same flags, checked
against the card as it is now (a plan that no longer fits says so instead of starting).

``R`` is the answer to the compositor growth warning: it re-plans the running model with
the request it was started with against the card as the app sees it now (the telemetry
window, so a desktop that grew is in it; this engine's own memory counts as freed), then
restarts the engine with the new command line. The new plan is made before the old
engine is stopped: when nothing fits any more, the old engine keeps running and the error
says why. The server panel then says what changed, old vs new.

Both restart the engine *in place* (:mod:`homelab.ui.backend_replan`): the same
supervisor and the same gate, so the gate's port stays up, requests queued there keep their
place and are answered by the new engine, and the gate takes the new plan's budget. Where
that cannot apply (an adopted engine, vLLM) the engine is stopped and started, its gate
too, and the app says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textual import work
from textual.message import Message

from homelab.errors import HomelabError
from homelab.ui import backend, backend_replan
from homelab.ui.catalog import ModelEntry
from homelab.ui.messages import EngineFailed, while_mounted
from homelab.units import format_bytes


@dataclass
class EngineReplanned(Message, bubble=False):
    """The engine restarted in place into ``plan`` (a ``Plan``), planned with ``options``
    on ``planned_on``; ``note``: what the panel says of it. ``plan`` None: it did not."""

    plan: Any
    options: Any = None
    planned_on: Any = None
    note: str | None = None


class ReplanFlow:
    """The two restarts (see the module docstring)."""

    notify: Any
    post_message: Any
    call_from_thread: Any
    report: Any
    supervisor: Any
    running: ModelEntry | None
    running_plan: Any
    running_options: Any
    engine_alive: Any
    run_engine: Any
    serve: Any
    session: Any
    engine_note: str | None
    _planned_on: list
    _status_url: str | None
    _show_engine: Any
    _show_card: Any
    _show_growth: Any
    _sync_status: Any

    def _restartable(self, what: str) -> tuple[ModelEntry, Any, Path, Any] | None:
        """(entry, plan, model path, plan request) of the engine this app started, or None."""
        entry, plan, options = self.running, self.running_plan, self.running_options
        if not self.engine_alive() or entry is None or plan is None or options is None:
            self.notify(f"No engine of this session to {what}.", title=f"Nothing to {what}")
            return None
        return entry, plan, Path(self.supervisor.spec.model), options

    def action_restart(self) -> None:
        target = self._restartable("restart")
        if target is None:
            return
        entry, plan, path, options = target
        alloc = plan.candidate.allocation
        same = replace(options, ctx=alloc.n_ctx, slots=plan.settings.n_seq)
        why_not = backend_replan.why_not_in_place(self.session)
        if why_not is None:
            self.restart_in_place(same, self.report, "restart")
            return
        self._stop_and_start_note(why_not)
        self.run_engine(entry, plan, path, same, stop_first=True, report=self.report)

    def action_replan(self) -> None:
        target = self._restartable("re-plan")
        if target is None:
            return
        if self.report is None:
            self.notify("The card has not been read yet.", title="Nothing to re-plan on")
            return
        entry, plan, path, options = target
        self.notify(f"Re-planning {entry.name} on the card now…", title="Re-plan")
        why_not = backend_replan.why_not_in_place(self.session)
        if why_not is None:
            self.restart_in_place(options, self.report, "re-plan")
            return
        self._stop_and_start_note(why_not)
        self.replan_running(entry, plan, path, options, self.report)

    def _stop_and_start_note(self, why_not: str) -> None:
        self.notify(
            f"Stopping and starting it, its gate too ({why_not}): requests queued at the "
            "gate are answered with an error.",
            title="Restart",
            severity="warning",
        )

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def restart_in_place(self, options: Any, report: Any, why: str) -> None:
        """Restart the engine into the new plan under the same gate (on a worker thread)."""
        session, old = self.session, self.running_plan
        before = session.plan
        try:
            done = backend_replan.replan_in_place(session, options, report, why=why)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            if backend_replan.still_on(session, before):
                self.call_from_thread(
                    self.notify,
                    "The engine keeps running with its old plan.",
                    title="Not restarted",
                )
            self.post_message(EngineReplanned(None))
            return
        new = done.plan.plan
        note = replan_note(old, new) if why == "re-plan" else None
        self.post_message(EngineReplanned(new, options, report, in_place_note(done, note)))

    @while_mounted
    def on_engine_replanned(self, message: EngineReplanned) -> None:
        if message.plan is None:
            return
        if message.planned_on is not None:
            self._planned_on = [*self._planned_on[-3:], (message.plan, message.planned_on)]
        self.running_plan, self.running_options = message.plan, message.options
        self.engine_note = message.note
        self._show_engine()
        self._show_card()
        self._show_growth()  # the warning follows the plan now running
        self._status_url = None  # a new engine behind the same URL: fresh counters
        self._sync_status()

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def replan_running(
        self, entry: ModelEntry, old: Any, path: Path, options: Any, report: Any
    ) -> None:
        default = entry.preset.workload if entry.preset is not None else None
        try:
            new = backend.prepare(str(path.absolute()), report, options, default).plan.plan
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            self.call_from_thread(
                self.notify, "The engine keeps running with its old plan.", title="Not restarted"
            )
            return
        note = replan_note(old, new)
        self.serve(entry, new, path, options, stop_first=True, report=report, note=note)


def plan_figures(plan: Any) -> str:
    """``1 slot × 8,192 tokens, 1,433,600 fit``."""
    slots, alloc = plan.settings.n_seq, plan.candidate.allocation
    return f"{slots} slot{'s' if slots != 1 else ''} × {alloc.ctx_per_slot:,} tokens, {plan.tokens_fit:,} fit"


def plan_flags(plan: Any) -> str:
    """``-c 8192 -np 1`` (as the command line has them)."""
    return f"-c {plan.candidate.allocation.n_ctx} -np {plan.settings.n_seq}"


def replan_note(old: Any, new: Any) -> str:
    """What a re-plan changed, old → new, for the server panel."""
    grown = new.budget.desktop - old.budget.desktop
    if grown:
        sign = "+" if grown > 0 else "−"
        desktop = f"desktop {sign}{format_bytes(abs(grown), precision=0)}"
    else:
        desktop = "desktop unchanged"
    flags = f"{plan_flags(old)} → {plan_flags(new)}"
    if plan_flags(old) == plan_flags(new):
        flags += " (unchanged)"
    return (
        f"re-planned on the card now ({desktop}):\n"
        f"  was {plan_figures(old)}\n  now {plan_figures(new)}\n  flags {flags}"
    )


def in_place_note(done: Any, note: str | None) -> str:
    """The panel's words for a restart in place (``done``: the domain's ``Replan``):
    ``note`` (what a re-plan changed), then the engines and the gate's new limits."""
    lines = [note] if note else ["restarted with the same plan:"]
    lines.append(f"  pid {done.old_pid} → {done.pid}, behind the same gate")
    gate = done.restarted.gate
    if gate is not None:
        lines.append(f"  {gate_words(gate)}; queued requests kept their place")
    return "\n".join(lines)


def gate_words(event: Any) -> str:
    """``gate admits 2,048 tokens at once, up to 2,048 per request, 1 at once``."""
    words = []
    if event.budget_tokens:
        words.append(f"admits {event.budget_tokens:,} tokens at once")
    if event.ceiling:
        words.append(f"up to {event.ceiling:,} per request")
    if event.max_concurrent:
        words.append(f"{event.max_concurrent} at once")
    return "gate " + (", ".join(words) or "limits from the engine")


def retarget_words(event: Any) -> str | None:
    """What the app says of a ``GateRetargeted`` session event (a heal, a re-plan); None
    for another event."""
    from homelab.serve import events as ev

    return gate_words(event) if isinstance(event, ev.GateRetargeted) else None
