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
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from textual import work

from homelab.errors import HomelabError
from homelab.ui import backend
from homelab.ui.catalog import ModelEntry
from homelab.ui.messages import EngineFailed
from homelab.units import format_bytes


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
        self.replan_running(entry, plan, path, options, self.report)

    @work(thread=True, exclusive=True, group="engine", exit_on_error=False)
    def replan_running(
        self, entry: ModelEntry, old: Any, path: Path, options: Any, report: Any
    ) -> None:
        default = entry.preset.workload if entry.preset is not None else None
        try:
            header = backend.read_header(path)
            new = backend.plan(header, str(path.absolute()), report, options, default)
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
