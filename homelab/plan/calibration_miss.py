"""Calibration misses: plans that ran out of memory for real, and the smaller one that held.

A plan is a prediction; when the engine's allocation failed anyway (at load, while the
launch proof filled a slot, or later at run time) ``serve`` heals by restarting with a
smaller plan, and records the miss here: for this model × engine build × card (or
system RAM, under this engine memory limit) × compute-relevant flags, the settings that
failed (slots, context, what the plan priced them at) and the one that worked. The next
plan of the same key (:func:`avoid_misses`, inside :func:`homelab.plan.pipeline.plan_model`)
stays at the setting that worked instead of walking into the same wall, and says so.

Records live in ``state_dir()/calibration_misses.json`` (next to the compute
calibrations, same atomic write under a lock; a broken file is moved aside).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.gguf.header import GgufModel
from homelab.paths import state_dir
from homelab.plan.calibration import CalibrationError, EngineVersion
from homelab.plan.calibration_key import ModelIdentity, model_identity
from homelab.plan.record_store import locked, read_records, write_records
from homelab.plan.vocabulary import slots_by_tokens

if TYPE_CHECKING:
    from homelab.plan.planner import Plan, PlanRequest

FILE_NAME = "calibration_misses.json"
SCHEMA = 1
MAX_RECORDS = 200


@dataclass(frozen=True, slots=True)
class MissKey:
    """Which model, engine, memory and flags a miss belongs to (not the slots or context)."""

    model: ModelIdentity
    engine_version: str
    device: str
    """"gpu" or "cpu"."""
    card: str
    """The card's name (system RAM on a CPU plan)."""
    card_total: int
    memory_limit: int | None
    """The engine memory limit it ran under (bytes); None: none."""
    ubatch: int
    batch: int
    type_k: str
    type_v: str
    flash_attn: bool
    unified: bool


@dataclass(frozen=True, slots=True)
class Setting:
    """One launch: its slots, total context, and what the plan priced it at (bytes)."""

    slots: int
    ctx: int
    predicted: int

    @property
    def ctx_per_slot(self) -> int:
        return self.ctx // max(self.slots, 1)

    def describe(self) -> str:
        return slots_by_tokens(self.slots, self.ctx_per_slot)


@dataclass(frozen=True, slots=True)
class Miss:
    """Launches of one key that ran out of memory, and the one that then held (or None)."""

    key: MissKey
    failed: tuple[Setting, ...]
    worked: Setting | None
    stage: str
    """Where the first one failed: "load", "proof" or "run"."""
    said: str
    """The engine's own out-of-memory line."""
    recorded_at: str


def store_path() -> Path:
    """``state_dir()/calibration_misses.json``."""
    return state_dir() / FILE_NAME


def predicted_bytes(plan: Plan) -> int:
    """What the plan expects the engine to take on its device: weights, engine state, KV."""
    return plan.weights_on_device + plan.candidate.engine.total + plan.candidate.allocation.total


def setting_of(plan: Plan) -> Setting:
    """The launch ``plan`` makes."""
    return Setting(plan.settings.n_seq, plan.candidate.allocation.n_ctx, predicted_bytes(plan))


def miss_key(
    plan: Plan, identity: ModelIdentity, engine_version: str, memory_limit: int | None
) -> MissKey:
    """The key of ``plan`` run by ``engine_version`` under ``memory_limit``."""
    s, budget = plan.settings, plan.budget
    return MissKey(
        model=identity,
        engine_version=engine_version,
        device=budget.kind,
        card=budget.name,
        card_total=budget.total,
        memory_limit=memory_limit,
        ubatch=s.n_ubatch,
        batch=s.n_batch,
        type_k=s.type_k,
        type_v=s.type_v,
        flash_attn=s.flash_attn,
        unified=s.unified,
    )


# -- the store -------------------------------------------------------------------------------


def _setting(data: Any) -> Setting:
    setting = Setting(**data)
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in asdict(setting).values()
    ):
        raise ValueError(f"a setting with wrong values: {data}")
    return setting


def _miss_from_dict(data: dict[str, Any]) -> Miss:
    fields = dict(data)
    key = dict(fields["key"])
    key["model"] = ModelIdentity(**key["model"])
    fields["key"] = MissKey(**key)
    fields["failed"] = tuple(_setting(s) for s in fields["failed"])
    fields["worked"] = None if fields["worked"] is None else _setting(fields["worked"])
    return Miss(**fields)


def _read(path: Path) -> list[Miss]:
    return read_records(
        path, schema=SCHEMA, field="misses", what="calibration miss store", parse=_miss_from_dict
    )


def misses() -> list[Miss]:
    """Every stored miss, oldest first."""
    return _read(store_path())


def record_miss(
    key: MissKey,
    failed: tuple[Setting, ...],
    worked: Setting | None,
    *,
    stage: str,
    said: str,
) -> Miss:
    """Store a miss, merged with an earlier one of the same key (its failures kept).

    Raises:
        CalibrationError: the store cannot be written.
    """
    target = store_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with locked(target):
            stored = _read(target)
            earlier = [m for m in stored if m.key == key]
            seen = {f for m in earlier for f in m.failed}
            merged = tuple(sorted(seen | set(failed), key=lambda s: (s.predicted, s.slots)))
            if worked is not None:  # a setting that held is no longer a failure
                merged = tuple(f for f in merged if f.predicted > worked.predicted)
            elif earlier:
                worked = earlier[-1].worked
            miss = Miss(key, merged, worked, stage, said, time.strftime("%Y-%m-%dT%H:%M:%S"))
            kept = [m for m in stored if m.key != key]
            write_records(target, [*kept, miss], schema=SCHEMA, field="misses", keep=MAX_RECORDS)
    except OSError as error:
        raise CalibrationError(
            f"cannot write {target}: {error.strerror or error}",
            hint="Check that the homelab state folder is writable (HOMELAB_STATE_DIR).",
        ) from None
    return miss


def lookup_miss(key: MissKey) -> Miss | None:
    """The miss recorded for exactly ``key``, or None."""
    found = [m for m in misses() if m.key == key]
    return found[-1] if found else None


# -- the next plan ----------------------------------------------------------------------------


def avoid_misses(
    plan: Plan,
    model: GgufModel,
    request: PlanRequest,
    engine_version: EngineVersion,
    memory_limit: int | None,
    replan: Callable[[PlanRequest], Plan],
) -> Plan:
    """``plan``, or (when a launch at or beyond it ran out of memory before) the plan of the
    setting that held, with a warning saying why. ``replan(request)`` makes a plan.

    Only what the person left to the plan is narrowed: asked-for slots or context stand.
    """
    stored = misses()
    if not stored:
        return plan
    identity = model_identity(model)
    stored = [m for m in stored if m.key.model == identity]
    if not stored:
        return plan
    version = engine_version() if callable(engine_version) else engine_version
    if not version:
        return plan
    miss = lookup_miss(miss_key(plan, identity, version, memory_limit))
    if miss is None or not miss.failed or miss.worked is None:
        return plan
    now = setting_of(plan)
    smallest_failed = min(miss.failed, key=lambda s: s.predicted)
    if now.predicted < smallest_failed.predicted:
        return plan
    worked = miss.worked
    narrowed = request
    if request.parallel is None:
        narrowed = replace(narrowed, max_slots=min(request.max_slots, worked.slots))
    if request.ctx is None and worked.ctx_per_slot < now.ctx_per_slot:
        slots = min(now.slots, worked.slots) if request.parallel is None else now.slots
        narrowed = replace(narrowed, ctx=worked.ctx_per_slot * slots)
    if narrowed == request:
        return plan
    healed = replan(narrowed)
    failed = ", ".join(s.describe() for s in sorted(miss.failed, key=lambda s: -s.predicted))
    note = (
        f"Launching this model here at {failed} ran out of memory (at {miss.stage}: "
        f"{miss.said}); {worked.describe()} held, so the plan stays there (calibration)."
    )
    return replace(healed, warnings=(*healed.warnings, note))
