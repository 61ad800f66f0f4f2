"""What a front-end asks of one serve: the model, its plan options, the gate, the lifetime."""

from __future__ import annotations

from dataclasses import dataclass

from homelab.engine.supervision.facts import Asked
from homelab.errors import UsageError
from homelab.gate.config_file import GateChoices
from homelab.gpu.report import GpuReport
from homelab.plan.options import PlanOptions
from homelab.plan.workload import Workload
from homelab.serve.prepare import Prepared


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
    prepared: Prepared | None = None
    """Start from this planning of ``model`` with ``options`` (a local file a front-end has
    already prepared, e.g. the TUI's preview): the session does not plan it again. None: the
    session prepares the model itself (after pulling it), on ``report``."""
    gate: GateChoices | None = None
    """Put the admission gate on the public port (these settings over gate.toml); None:
    serve the engine directly on it."""

    def __post_init__(self) -> None:
        if not self.start_timeout_s > 0:
            raise UsageError("The start timeout must be positive.")

    def asked(self) -> Asked:
        """The settings the person set explicitly (they must hold for an adoption)."""
        o, w = self.options, self.options.workload
        return Asked(
            ctx=w.ctx,
            slots=w.slots,
            cache_type_k=None if w.cache_type_k is None else o.type_k,
            cache_type_v=None if w.cache_type_v is None else o.type_v,
            unified=True if w.unified else None,
            port=o.engine.port,
            engine=o.engine.name,
        )
