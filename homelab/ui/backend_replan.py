"""The TUI's restarts of the running engine into a new plan under the same gate (the
domain calls, like :mod:`homelab.ui.backend`): :mod:`homelab.serve.replan`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions
    from homelab.serve.replan import Replan
    from homelab.serve.session import ServeSession


def why_not_in_place(session: ServeSession | None) -> str | None:
    """Why the session's engine cannot restart into a new plan in place (then it is stopped
    and started: its gate too); None when it can."""
    if session is None:
        return "no engine of this session runs"
    from homelab.serve.replan import why_not_in_place as why_not

    return why_not(session)


def replan_in_place(
    session: ServeSession, options: PlanOptions, report: GpuReport | None, *, why: str
) -> Replan:
    """Re-plan the running model with ``options`` on ``report`` (the card as the app saw
    it, our own engine counted as freed; None: read the card now), restart the engine into
    it under the same gate, and wait until it is ready.

    Raises:
        HomelabError: the plan failed (the engine keeps running as it was; see
            :func:`still_on`), or the restarted engine did not come up.
    """
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.replan import replan

    card = None if report is None else without_own_engines(report)
    return replan(session, options, report=card, why=why)


def still_on(session: ServeSession, plan: Any) -> bool:
    """True while the session still serves ``plan`` (a ``ServePlan``): a re-plan that
    failed before anything was stopped."""
    return session.plan is plan


def planned_restart(transition: Any) -> bool:
    """True for a restart the supervisor was asked for (into a re-planned or healed spec),
    not one after a crash (which comes after a CRASHED transition)."""
    from homelab.engine.supervision.states import State

    return transition.state is State.RESTARTING and transition.previous is not State.CRASHED
