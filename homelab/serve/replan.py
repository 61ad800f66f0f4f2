"""Re-plan the running engine and restart it into the new plan under the same session,
supervisor and gate (the TUI's ``R``, re-planned on the card now, and ``r``, the same plan
again).

The restart itself is the session's (:meth:`ServeSession.restart_into
<homelab.serve.session.ServeSession.restart_into>`, which the heal uses too): the plan's
command line on the engine's own port and program, handed to the supervisor, which restarts
into it; the gate in front takes the new plan's budget and ceiling on its live queue —
queued requests keep their place, and an admitted request whose engine is down for the
restart waits for it to come back (:mod:`homelab.gate.engine_wait`). Clients keep the
gate's port.

:func:`replan` re-plans through the one planning pass (:meth:`ServeSession.prepare
<homelab.serve.session.ServeSession.prepare>`, a fresh look at the card unless a report is
given) *before* anything stops: a plan that no longer fits raises and the engine keeps
running as it was. It says so as ``Replanning`` then ``Replanned`` session events
(``GateRetargeted`` between them when a gate runs).

Where it cannot apply (:func:`why_not_in_place`): an adopted engine (homelab did not plan
it), a kind that does not restart in place (``EngineKind.restarts_in_place``), no engine of
this session running; a front-end then stops and starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from homelab.errors import EngineError
from homelab.serve import events as ev
from homelab.serve.session_view import Restarted

if TYPE_CHECKING:
    from homelab.engine.kinds import ServePlan
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions
    from homelab.serve.session import ServeSession

READY_TIMEOUT_S = 600.0
"""How long :func:`replan` waits for the restarted engine to be ready."""


@dataclass(frozen=True, slots=True)
class Replan:
    """A restart into a new plan that held: the plan, what was handed over, the engines."""

    plan: ServePlan
    restarted: Restarted
    old_pid: int | None
    pid: int | None


def why_not_in_place(session: ServeSession) -> str | None:
    """Why this session's engine cannot be restarted into a new plan in place (a front-end
    then stops and starts it); None when it can."""
    if not session.live:
        return "no engine of this session runs"
    if session.adopted is not None or session.plan is None:
        return "the engine was adopted (homelab did not plan it)"
    if not session.kind.restarts_in_place:
        return f"{session.kind.name} restarts by stopping and starting"
    return None


def replan(
    session: ServeSession,
    options: PlanOptions,
    *,
    report: GpuReport | None = None,
    why: str = "re-plan",
) -> Replan:
    """Re-plan the running model with ``options`` (on ``report``, else the card read now),
    restart the engine into it under the same supervisor and gate, wait until it is ready.

    Returns what happened (the new plan first). Raises:
        EngineError: it cannot be done in place (:func:`why_not_in_place`), or the
            restarted engine did not come up (the supervisor's explained failure).
        HomelabError: the new plan failed (nothing was stopped).
    """
    reason = why_not_in_place(session)
    if reason is not None:
        raise EngineError(f"cannot restart the engine into a new plan here: {reason}")
    supervisor = session.supervisor
    assert supervisor is not None
    new = session.prepare(options, report).plan
    old_pid, attempt = supervisor.pid, supervisor.events[-1].attempt
    if session.healer is not None:  # a later heal shrinks from this plan and these options
        session.healer.replanned(options)
    session.emit(ev.Replanning(why, old_pid))
    restarted = session.restart_into(new, now=True)
    ready = supervisor.wait_ready(READY_TIMEOUT_S, after=attempt)
    measured = session.kind.measure(new, supervisor.attempt_lines(), restarted.argv[0])
    if measured is not None:
        session.emit(ev.Actuals(measured))
    session.emit(ev.Replanned(why, old_pid, ready.pid))
    return Replan(new, restarted, old_pid, ready.pid)
