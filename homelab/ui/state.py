"""What the app's flows share, typed, each field with the flow that writes it.

The app (:class:`homelab.ui.app.HomelabApp`) is one object made of flows, one concern
each (``homelab/ui/*_flow.py``). What only one flow uses stays on that flow; what one
flow writes and others read lives here, in :class:`AppState` (``app.state``). All of it
is written on the app's thread (message handlers, key actions); workers read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.engine.kinds import Measured
    from homelab.engine.supervision.failure import EngineFailure
    from homelab.engine.supervision.record import EngineRecord
    from homelab.engine.supervision.supervisor import Supervisor
    from homelab.errors import HomelabError
    from homelab.gpu.report import GpuReport
    from homelab.plan.budget import DeviceBudget
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan
    from homelab.polling import Clock
    from homelab.serve.prepare import Prepared
    from homelab.serve.session import ServeSession
    from homelab.serve.set_view import SetView
    from homelab.ui.catalog import ModelEntry
    from homelab.ui.log_feed import LogFeed

LOOKING = "looking for an engine an earlier homelab left running…"
"""What the server panel (and ``s``) says while the adoption worker looks."""


@dataclass(frozen=True, slots=True)
class AppArgs:
    """How the app was made (:func:`homelab.ui.app.make_app`'s arguments); read by all."""

    gpu_snapshot: Path | None
    """A recorded card to replay instead of the driver's."""
    vram: int | None
    """A synthetic card of this many bytes (read once)."""
    models_dirs: tuple[Path, ...]
    port: int | None
    """The engine's port (None: the default)."""
    refresh_s: float
    """How often the card is sampled (and the engine asked); 0: the card is read once."""
    blink: bool
    adopt: bool
    """Adopt an engine an earlier homelab left running."""
    telemetry_clock: Clock | None
    """When a replayed card's next sample is taken (tests); None: real time."""
    check_agents: bool
    """Run the agent contract check on its own when an engine becomes ready (once per URL
    and model); off where a test counts the engine's requests."""


@dataclass(slots=True)
class Card:
    """The card as last read. Written by ``HomelabApp.on_card_read``; read by the models
    flow (verdicts, plans), the live flow (growth), the engine and re-plan flows (the
    report a start or a re-plan is planned on)."""

    report: GpuReport | None = None
    budgets: list[DeviceBudget] = field(default_factory=list)
    """One per card (system RAM without one)."""


@dataclass(frozen=True, slots=True)
class Preview:
    """The picked model prepared (a local file): what the plan panel shows and ``s`` starts."""

    prepared: Prepared
    report: GpuReport
    """The card it was planned on (our own running engine counted as freed when planned)."""
    options: PlanOptions

    def to_start(self, report: GpuReport | None, options: PlanOptions) -> Prepared | None:
        """The preview to start from when a start would plan on the same card with the same
        options (the plan shown is the plan that runs); None: the card or the settings
        changed since, and the session plans on the card as it is now."""
        same = report == self.report and options == self.options
        return self.prepared if same else None


@dataclass(slots=True)
class Picked:
    """The picked row and its plan. Written by the models flow (pick, plan made or
    failed); read by the engine flow (``s`` starts it), the download flow (``d`` pulls
    it), the live flow (growth) and the card panel."""

    entry: ModelEntry | None = None
    plan: Plan | None = None
    argv: list[str] = field(default_factory=list)
    model_path: Path | None = None
    """The local GGUF the plan reads (None: not downloaded yet)."""
    preview: Preview | None = None
    """The plan prepared for a start (None: not downloaded yet, or no plan)."""


@dataclass(slots=True)
class Running:
    """The engine this app started or adopted. Written by the engine flow (started,
    stopped) and the re-plan flow (the plan it restarted into); read by the server, live,
    models and re-plan flows and the card panel."""

    session: ServeSession | None = None
    supervisor: Supervisor | None = None
    entry: ModelEntry | None = None
    plan: Plan | None = None
    """The plan it serves (None: stopped, or adopted without one)."""
    options: PlanOptions | None = None
    """The plan request it was started with (None: adopted)."""
    log_feed: LogFeed | None = None


@dataclass(slots=True)
class Health:
    """What the running engine did since it started. Written by the server flow (the
    supervisor's transitions, the session's events); made anew by the engine flow when an
    engine starts (and ``state``/``ready_at`` when it stops); ``note`` also by the re-plan
    flow. Read by the server panel, the engine flow and the live flow (metrics while ready)."""

    state: str | None = None
    """The supervisor's state's value (``"ready"``, ``"stopped"``…); None before any engine."""
    ready_at: float | None = None
    """``time.monotonic()`` when it became ready (None while not ready)."""
    restarts: int = 0
    """Restarts after a crash (not the ones asked for)."""
    crashes: int = 0
    failure: EngineFailure | None = None
    """The last failure (kept, as "last crash", once ready again)."""
    failure_past: bool = False
    gave_up: bool = False
    """The supervisor stopped restarting it."""
    note: str | None = None
    """What the server panel says of this start (a launch proof, a heal, a re-plan)."""
    actuals: Measured | None = None


@dataclass(slots=True)
class AppState:
    """Everything one flow writes and another reads (see each part)."""

    args: AppArgs
    card: Card = field(default_factory=Card)
    picked: Picked = field(default_factory=Picked)
    row_settings: dict[str, dict[str, str]] = field(default_factory=dict)
    """The plan panel's fields as edited for a row (its key): an edit belongs to the row it
    was made on (that row's plan and verdict), never to every row; ``z`` drops it. Written
    by the models flow."""
    running: Running = field(default_factory=Running)
    health: Health = field(default_factory=Health)
    engine_problem: HomelabError | None = None
    """Why no engine can start (no llama-server, or one without a GPU backend where a card
    is). Written by the server flow (the check at start) and the engine-setup flow (one
    found); read by both."""
    looking: bool = False
    """The app is still looking for an engine an earlier homelab left running (its adoption
    worker runs): the server panel says so and ``s`` waits. Set at start when adopting;
    cleared by the engine flow once looked."""
    agent_contract: str | None = None
    """The agent contract check's line for the URL (``tool calls: ok``); None: not run for
    the engine that is ready now."""
    agent_contracts: dict[tuple[str, str], str] = field(default_factory=dict)
    """The check's line per (URL, model file) already checked on its own: a restart or a
    re-plan of the same model is not probed again (its template, hence its line, is the same)."""
    kept: EngineRecord | None = None
    """The engine homelab's keeper serves (``serve --detach``), found at start and not this
    app's to supervise; None: none. Written by the kept flow (and cleared when this app
    starts its own engine)."""
    left_note: str | None = None
    """What quitting with "leave running" did (handed to a keeper, or why not), printed
    once the app has ended."""
    engine_backend: str | None = None
    """What the llama-server found computes on (its own ``--list-devices``), for the server
    panel. Written by the server flow's engine check; None: not asked yet, or it did not say."""

    served_set: SetView | None = None
    """A set of models homelab serves (``homelab serve A B C``, its own process): shown in
    the card bar and the server panel, never adopted, stopped or started beside. Written by
    the set flow's look."""

    def engine_alive(self) -> bool:
        """An engine of this app is supervised and not stopped."""
        return self.running.supervisor is not None and self.health.state not in (None, "stopped")
