"""What a serve session tells its front-ends, in order, as frozen dataclasses.

A fresh start::

    [PresetChosen] [PullProgress... Pulled] Planned Starting Started
    EngineChanged(starting) EngineChanged(ready) Ready [Actuals] [LeftRunning] ... Stopped

An engine that already runs: ``Adopting`` instead of ``Planned … Started``; one that runs
with other settings, asked to be replaced: ``Replacing`` first. Any failure: ``Failed``
(the same error the session raises). Unreadable state files moved aside: ``SetAsideNotice``.

With the admission gate asked for (``ServeRequest.gate``): ``GateKeyCreated`` first when an
API key was made for it, then after ``Ready`` (and ``Actuals``) ``GateStarted`` — or, for an
adopted engine, ``GateAdopted`` (its gate runs already), ``GateRepairing`` (its gate died:
started again on its port) or ``GateMissing`` (it runs
without one) — and ``GateStopped`` before ``Stopped`` when the session stopped its gate.

With the launch proof (``ServeOptions.prove``): ``Proving`` and ``Proved`` before ``Ready``.
An out-of-memory (at load, in the proof, at run time): ``Healing`` then ``Planned Starting
Started ...`` again for the smaller plan, and ``Healed`` once one held.

A re-plan of the running engine under the same gate (:mod:`homelab.serve.replan`):
``Replanning``, ``GateRetargeted`` (with a gate), ``EngineChanged(restarting, starting,
ready)``, ``Actuals``, ``Replanned``. The gate takes new limits (a heal, a re-plan):
``GateRetargeted``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from pathlib import Path

    from homelab.engine.kinds import Measured, ServePlan
    from homelab.engine.supervision.record import EngineRecord
    from homelab.engine.supervision.state_file import SetAside
    from homelab.engine.supervision.states import Transition
    from homelab.errors import HomelabError
    from homelab.hub.download import PullProgress as HubProgress
    from homelab.plan.calibration_miss import Setting
    from homelab.serve.prove import ProofResult


@dataclass(frozen=True, slots=True)
class PresetChosen:
    """The model named a preset; it brings its repo and workload hint."""

    key: str
    name: str
    ref: str


@dataclass(frozen=True, slots=True)
class PullProgress:
    """Bytes arriving for the model."""

    progress: HubProgress


@dataclass(frozen=True, slots=True)
class Pulled:
    """The model is in the cache; ``note`` says something worth saying (e.g. a quant choice)."""

    path: str
    note: str | None


@dataclass(frozen=True, slots=True)
class SetAsideNotice:
    """An unreadable state file was moved aside (never deleted)."""

    set_aside: SetAside


@dataclass(frozen=True, slots=True)
class Planned:
    """The plan and the command line it gives, and a note when the port moved."""

    plan: ServePlan
    argv: tuple[str, ...]
    port_note: str | None


@dataclass(frozen=True, slots=True)
class Adopting:
    """An engine that runs already (as asked) is taken over instead of starting another."""

    record: EngineRecord
    program: str
    age_s: float


@dataclass(frozen=True, slots=True)
class Replacing:
    """The running engine is stopped first (``replace`` was asked for)."""

    program: str
    pid: int
    model: str | None
    url: str | None


@dataclass(frozen=True, slots=True)
class Starting:
    """The engine program is about to be spawned."""

    kind: str
    program: str


@dataclass(frozen=True, slots=True)
class Started:
    """It runs (not yet ready): its pid, its log, and the port it got."""

    pid: int | None
    log_path: Path | None
    wanted_port: int
    port: int


@dataclass(frozen=True, slots=True)
class EngineChanged:
    """A supervisor transition (starting, ready, crashed, restarting, stopping, stopped)."""

    transition: Transition


@dataclass(frozen=True, slots=True)
class Ready:
    """It answers: its URL."""

    url: str
    pid: int | None
    program: str
    reason: str


@dataclass(frozen=True, slots=True)
class Actuals:
    """Predicted vs actual memory and the calibration record (or why there is none)."""

    measured: Measured


@dataclass(frozen=True, slots=True)
class LeftRunning:
    """A detached engine was left running (the session let go of it)."""

    log_path: Path | None
    adopted: bool


@dataclass(frozen=True, slots=True)
class Stopped:
    """The session ended: ``how`` is "stopped" (asked), "outside" (a stop or replace from
    elsewhere), "failed" (see the Failed event before it) or "released" (left running)."""

    how: str


@dataclass(frozen=True, slots=True)
class Failed:
    """The session failed with ``error`` (also raised to the caller)."""

    error: HomelabError


@dataclass(frozen=True, slots=True)
class GateKeyCreated:
    """An API key was made for the gate (said once: it is only ever in this file)."""

    path: str
    key: str


@dataclass(frozen=True, slots=True)
class GateSamplingNote:
    """Some of the gate's ``[sampling]`` defaults cannot reach the engine on every route."""

    message: str


@dataclass(frozen=True, slots=True)
class GateStarted:
    """The admission gate listens at ``url`` in front of the engine at ``engine_url``."""

    url: str
    budget: int | None
    """Tokens (prompt + output) it admits at once, all requests together."""
    max_concurrent: int | None
    """Requests it lets through at once."""
    engine_url: str
    detached: bool
    """It runs in a process of its own (it outlives this session, like the engine)."""
    ceiling: int | None = None
    """The most tokens one request may be charged (the record's ``gate_budget_tokens``)."""


@dataclass(frozen=True, slots=True)
class GateAdopted:
    """The adopted engine's gate runs already: clients keep using ``url``."""

    url: str
    ceiling: int | None
    """The most tokens one request may be charged."""


@dataclass(frozen=True, slots=True)
class GateMissing:
    """The adopted engine runs without a gate (``reason`` says why); it is served directly."""

    reason: str


@dataclass(frozen=True, slots=True)
class GateRepairing:
    """The adopted engine's gate at ``url`` is gone (killed, crashed): it starts again there
    once the engine answers."""

    url: str


@dataclass(frozen=True, slots=True)
class GateStopped:
    """The session stopped the gate at ``url``."""

    url: str


@dataclass(frozen=True, slots=True)
class GateRetargeted:
    """The gate took a new plan's limits on its live queue (queued requests kept)."""

    budget_tokens: int | None
    """Tokens it admits at once, all requests together."""
    max_concurrent: int | None
    ceiling: int | None = None
    """The most tokens one request may be charged."""


@dataclass(frozen=True, slots=True)
class Replanning:
    """The running engine restarts into a new plan under the same gate (``why``: "re-plan"
    or "restart", the same plan again)."""

    why: str
    pid: int | None
    """The engine that is ended for it."""


@dataclass(frozen=True, slots=True)
class Replanned:
    """The engine runs the new plan, ready: a new pid behind the same public URL."""

    why: str
    old_pid: int | None
    pid: int | None


@dataclass(frozen=True, slots=True)
class Proving:
    """The launch proof starts: one request filling ``slot``'s context (``prompt_tokens``)."""

    slot: int
    prompt_tokens: int
    ctx_per_slot: int


@dataclass(frozen=True, slots=True)
class Proved:
    """What the launch proof saw: peak memory against the plan's figure, the time, and
    whether it ran out of memory."""

    result: ProofResult


@dataclass(frozen=True, slots=True)
class Healing:
    """The engine ran out of memory (``stage``: load, proof or run); it restarts smaller.

    ``said`` is the engine's own out-of-memory line."""

    stage: str
    said: str
    was: Setting
    now: Setting
    step: int
    max_steps: int
    argv: tuple[str, ...] = ()
    """The smaller plan's command line."""


@dataclass(frozen=True, slots=True)
class Healed:
    """A smaller plan held after an out-of-memory; the miss is in the calibration store
    (``recorded`` False, with ``not_recorded`` saying why, when it could not be written)."""

    failed: tuple[Setting, ...]
    worked: Setting
    recorded: bool
    not_recorded: str | None = None


@dataclass(frozen=True, slots=True)
class PromptCacheOff:
    """The engine's host-RAM prompt cache could not copy a slot's state (out of memory):
    llama-server drops the cache and serves on, so nothing restarts; ``said`` is its line,
    ``cache_ram`` the ``--cache-ram`` MiB it ran with (None: llama-server's default)."""

    said: str
    cache_ram: int | None = None


_Preparing: TypeAlias = PresetChosen | PullProgress | Pulled | SetAsideNotice | Planned
_Engine: TypeAlias = Adopting | Replacing | Starting | Started | EngineChanged | Ready | Actuals
_Ending: TypeAlias = LeftRunning | Stopped | Failed
_Gate: TypeAlias = (
    GateKeyCreated
    | GateSamplingNote
    | GateStarted
    | GateAdopted
    | GateMissing
    | GateRepairing
    | GateStopped
)
_Replan: TypeAlias = GateRetargeted | Replanning | Replanned
_Proof: TypeAlias = Proving | Proved | Healing | Healed | PromptCacheOff
SessionEvent: TypeAlias = _Preparing | _Engine | _Ending | _Gate | _Replan | _Proof
"""Every event a serve session publishes (:mod:`homelab.serve.describe` words each one)."""
