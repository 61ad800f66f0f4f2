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

Both restart the engine *in place* (:mod:`homelab.serve.replan`): the same
supervisor and the same gate, so the gate's port stays up, requests queued there keep their
place and are answered by the new engine, and the gate takes the new plan's budget. Where
that cannot apply (an adopted engine, vLLM) the engine is stopped and started, its gate
too, and the app says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.message import Message

from homelab.errors import HomelabError
from homelab.plan.vocabulary import summary_words
from homelab.serve.describe import describe
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.engine_flow import EngineFlow
from homelab.ui.messages import EngineFailed, while_mounted
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan
    from homelab.serve.replan import Replan


@dataclass
class EngineReplanned(Message, bubble=False):
    """The engine restarted in place into ``plan`` (a ``Plan``), planned with ``options``
    on ``planned_on``; ``note``: what the panel says of it. ``plan`` None: it did not."""

    plan: Plan | None
    options: PlanOptions | None = None
    planned_on: GpuReport | None = None
    note: str | None = None


class ReplanFlow(EngineFlow):
    """The two restarts of the engine flow's engine (see the module docstring)."""

    def _restartable(self, what: str) -> tuple[ModelEntry, Plan, Path, PlanOptions] | None:
        """(entry, plan, model path, plan request) of the engine this app started, or None."""
        running = self.state.running
        entry, plan, options = running.entry, running.plan, running.options
        if not self.state.engine_alive() or entry is None or plan is None or options is None:
            self.notify(f"No engine of this session to {what}.", title=f"Nothing to {what}")
            return None
        assert running.supervisor is not None
        return entry, plan, Path(running.supervisor.spec.model), options

    def action_restart(self) -> None:
        target = self._restartable("restart")
        if target is None:
            return
        entry, plan, path, options = target
        alloc = plan.candidate.allocation
        same = options.pinned(ctx=alloc.n_ctx, slots=plan.settings.n_seq)
        report = self.state.card.report
        self.notify(f"Restarting {entry.name} with the same plan…", title="Restart")
        why_not = backend.why_not_in_place(self.state.running.session)
        if why_not is None:
            self.restart_in_place(same, report, "restart")
            return
        self._stop_and_start_note(why_not)
        self.run_engine(entry, plan, path, same, stop_first=True, report=report)

    def action_replan(self) -> None:
        target = self._restartable("re-plan")
        if target is None:
            return
        report = self.state.card.report
        if report is None:
            self.notify("The card has not been read yet.", title="Nothing to re-plan on")
            return
        entry, plan, path, options = target
        self.notify(f"Re-planning {entry.name} on the card now…", title="Re-plan")
        why_not = backend.why_not_in_place(self.state.running.session)
        if why_not is None:
            self.restart_in_place(options, report, "re-plan")
            return
        self._stop_and_start_note(why_not)
        self.replan_running(entry, plan, path, options, report)

    def _stop_and_start_note(self, why_not: str) -> None:
        self.notify(
            f"Stopping and starting it, its gate too ({why_not}): requests queued at the "
            "gate are answered with an error.",
            title="Restart",
            severity="warning",
        )

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def restart_in_place(self, options: PlanOptions, report: GpuReport | None, why: str) -> None:
        """Restart the engine into the new plan under the same gate (on a worker thread)."""
        session, old = self.state.running.session, self.state.running.plan
        assert session is not None  # the key found an engine of this session
        before = session.plan
        try:
            done = backend.replan_in_place(session, options, report, why=why)
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            if session.plan is before:  # it failed before anything was stopped
                self.call_from_thread(
                    self.notify,
                    "The engine keeps running with its old plan.",
                    title="Not restarted",
                )
            self.post_message(EngineReplanned(None))
            return
        new = done.plan.plan
        note = replan_note(old, new) if why == "re-plan" and old is not None else None
        self.post_message(EngineReplanned(new, options, report, in_place_note(done, note)))

    @while_mounted
    def on_engine_replanned(self, message: EngineReplanned) -> None:
        if message.plan is None:
            return
        self.state.running.plan, self.state.running.options = message.plan, message.options
        self.state.health.note = message.note
        self._show_engine()
        self._show_card()  # then the live flow: the growth warning, fresh counters

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def replan_running(
        self, entry: ModelEntry, old: Plan, path: Path, options: PlanOptions, report: GpuReport
    ) -> None:
        default = entry.preset.workload if entry.preset is not None else None
        key = entry.preset.key if entry.preset is not None else None
        try:
            prepared = backend.prepare(
                str(path.absolute()), report, options, default, served_name=key
            )
        except HomelabError as error:
            self.post_message(EngineFailed(error))
            self.call_from_thread(
                self.notify, "The engine keeps running with its old plan.", title="Not restarted"
            )
            return
        new = prepared.plan.plan
        note = replan_note(old, new)
        self.serve(
            entry, new, path, options, stop_first=True, report=report, note=note, prepared=prepared
        )


def plan_figures(plan: Plan) -> str:
    """``1 slot × 8,192 tokens allocated, 1,433,600 tokens fit`` (as ``homelab plan`` says)."""
    return summary_words(plan)


def plan_flags(plan: Plan) -> str:
    """``-c 8192 -np 1`` (as the command line has them)."""
    return f"-c {plan.candidate.allocation.n_ctx} -np {plan.settings.n_seq}"


def replan_note(old: Plan, new: Plan) -> str:
    """What a re-plan changed, old → new, for the server panel."""
    grown = new.budget.desktop - old.budget.desktop
    if grown:
        sign = "+" if grown > 0 else "−"
        desktop = f"desktop {sign}{format_bytes(abs(grown))}"
    else:
        desktop = "desktop unchanged"
    flags = f"{plan_flags(old)} → {plan_flags(new)}"
    if plan_flags(old) == plan_flags(new):
        flags += " (unchanged)"
    return (
        f"re-planned on the card now ({desktop}):\n"
        f"  was {plan_figures(old)}\n  now {plan_figures(new)}\n  flags {flags}"
    )


def in_place_note(done: Replan, note: str | None) -> str:
    """The panel's words for a restart in place (``done``: the domain's ``Replan``):
    ``note`` (what a re-plan changed), then the engines and the gate's new limits."""
    lines = [note] if note else ["restarted with the same plan:"]
    lines.append(f"  pid {done.old_pid} → {done.pid}, behind the same gate")
    gate = done.restarted.gate
    if gate is not None:
        lines.append(f"  {describe(gate).line}")
    return "\n".join(lines)
