"""What the heal (:mod:`homelab.serve.heal`) sees of the serve session that holds it: this
view of :class:`~homelab.serve.session.ServeSession`, so the heal never imports the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from homelab.serve import events as ev
from homelab.serve.events import SessionEvent

if TYPE_CHECKING:
    from homelab.engine.kinds import EngineKind, ServePlan
    from homelab.engine.supervision.record import EngineRecord
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions
    from homelab.serve.prepare import Prepared
    from homelab.serve.request import ServeRequest


@dataclass(frozen=True, slots=True)
class Restarted:
    """What :meth:`SessionView.restart_into` handed over."""

    argv: tuple[str, ...]
    """The plan's command line (the engine's port and program)."""
    gate: ev.GateRetargeted | None
    """The limits the gate took now (None: no gate, or it starts later)."""


class SessionView(Protocol):
    """The serve session as its heal sees it: what was asked, the plan running, the news."""

    request: ServeRequest
    kind: EngineKind
    plan: ServePlan | None
    adopted: EngineRecord | None

    def emit(self, event: SessionEvent) -> None:
        """Say ``event`` to the session's subscribers."""
        ...

    def prepare(self, options: PlanOptions, report: GpuReport | None) -> Prepared:
        """The running model planned anew with ``options`` (on ``report``, else the card now)."""
        ...

    def restart_into(self, plan: ServePlan, *, now: bool, retarget: bool = True) -> Restarted:
        """Hand ``plan`` to the engine's supervisor, its port and program kept."""
        ...
