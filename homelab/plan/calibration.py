"""Calibration: llama-server's measured buffers, remembered per (model, engine, flags).

llama.cpp has no closed form for its compute buffer (it reserves the worst-case
graph and measures it), so the plan's figure is an estimate until a run logs the
real one. After a run, ``homelab.engine.llamacpp.calibrate.record`` stores what the
load log measured; the next plan of the same model under the same engine build
consults the store inside its one planning pass (:func:`measurements_for` gives the
planner a :class:`MeasuredCompute` lookup): each candidate setting is priced with the
measurement of its own flags when there is one, else with its estimate corrected by
the error of the nearest measurement of the same compute-relevant flags (the plan then
says so), else with the estimate; the plan's working says "measured" when a
measurement was used.

The key (model, engine version, compute-relevant flags) is
:class:`~homelab.plan.calibration_key.CalibrationKey`.

Plans that ran out of memory for real (and the smaller setting that then held) are the
other half of calibration: :mod:`homelab.plan.calibration_miss`, consulted in the same
planning path.

Records live in ``state_dir()/calibration.json``, written atomically under a
lock. A file that cannot be read as a calibration store is renamed aside
(``calibration.json.corrupt-<time>``) with a warning and treated as empty: a
broken cache never stops a plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from homelab.errors import HomelabError
from homelab.gguf.header import GgufModel
from homelab.paths import state_dir
from homelab.plan.calibration_key import (
    CalibrationKey,
    ModelIdentity,
    key_from_dict,
    key_of,
    model_identity,
)
from homelab.plan.fit import Measurement, MeasurementFor
from homelab.plan.kv import KvSettings
from homelab.plan.record_store import locked, read_records, write_records

FILE_NAME = "calibration.json"
SCHEMA = 1
MAX_RECORDS = 500
"""Oldest records are dropped beyond this (one record per model × engine × flags)."""


class CalibrationError(HomelabError):
    """A measurement could not be recorded (nothing measured, a log that is not this
    plan's, an unknown engine version, or the state folder cannot be written)."""

    title = "Calibration not recorded"


@dataclass(frozen=True, slots=True)
class Calibration:
    """What one run measured, in bytes (None where its log had no line).

    ``compute`` is the device compute buffer as logged; ``measured_compute`` is the
    figure the planner takes (``PlanRequest.measured_compute``): the logged buffer less
    the flash-attention scratch the plan prices per token on CUDA, which the planner
    adds back (so a re-plan at the same flags prices exactly the logged buffer).
    """

    key: CalibrationKey
    compute: int
    measured_compute: int
    predicted_compute: int
    model: int | None
    kv: int | None
    recurrent: int | None
    output: int | None
    recorded_at: str


def store_path() -> Path:
    """``state_dir()/calibration.json``."""
    return state_dir() / FILE_NAME


# -- the store -------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _calibration_from_dict(data: dict[str, Any]) -> Calibration:
    """One stored record; TypeError/KeyError/ValueError when it is not one."""
    fields = dict(data)
    fields["key"] = key = key_from_dict(fields["key"])
    calibration = Calibration(**fields)
    sizes = (calibration.compute, calibration.measured_compute, calibration.predicted_compute)
    counts = (key.ctx, key.parallel, key.ubatch, key.batch, key.model.size, key.n_cpu_moe)
    optional = (calibration.model, calibration.kv, calibration.recurrent, calibration.output)
    if (
        not all(_is_int(v) and v >= 0 for v in (*sizes, *counts))
        or not all(v is None or _is_int(v) for v in (*optional, key.n_gpu_layers))
        or not all(isinstance(v, bool) for v in (key.flash_attn, key.unified))
    ):
        raise ValueError(f"a record with wrong value types: {str(data)[:120]}")
    return calibration


def _read(path: Path) -> list[Calibration]:
    """Every record in the store; [] when there is none; a corrupt file is moved aside."""
    return read_records(
        path, schema=SCHEMA, field="records", what="calibration store", parse=_calibration_from_dict
    )


def records(path: Path | None = None) -> list[Calibration]:
    """Every stored record, oldest first."""
    return _read(path or store_path())


def save(calibration: Calibration, path: Path | None = None) -> None:
    """Store ``calibration``, replacing any record of the same key (atomic, under a lock).

    Raises:
        CalibrationError: the store cannot be written.
    """
    target = path or store_path()
    try:
        with locked(target):
            kept = [c for c in _read(target) if c.key != calibration.key]
            write_records(
                target, [*kept, calibration], schema=SCHEMA, field="records", keep=MAX_RECORDS
            )
    except OSError as error:
        raise CalibrationError(
            f"cannot write {target}: {error.strerror or error}",
            hint="Check that the homelab state folder is writable (HOMELAB_STATE_DIR).",
        ) from None


# -- the lookup one planning pass consults ------------------------------------------------

EngineVersion = str | None | Callable[[], str | None]
"""The engine build's version tag, or a function giving it (called only when needed)."""


@dataclass(frozen=True, slots=True)
class MeasuredCompute:
    """The store's measurements of one model under one engine build, by flags.

    Implements :class:`homelab.plan.fit.ComputeMeasurements`: for one set of
    compute-relevant flags (device, micro-batch, batch, cache types, flash attention,
    unified KV, ``-ngl``, ``--n-cpu-moe``) it answers, for each (context, slots) the fitter tries, the
    record of exactly that setting, else the nearest one of the same flags (fewest
    slots apart, then the closest context; the fitter then takes only its error), else
    nothing.
    """

    identity: ModelIdentity
    engine_version: str
    by_key: Mapping[CalibrationKey, Calibration]

    def for_flags(
        self, device: str, base: KvSettings, n_gpu_layers: int | None, n_cpu_moe: int = 0
    ) -> MeasurementFor | None:
        probe = key_of(
            self.identity,
            self.engine_version,
            device,
            base,
            n_ctx=0,
            n_gpu_layers=n_gpu_layers,
            n_cpu_moe=n_cpu_moe,
        )
        family = {
            (k.ctx, k.parallel): Measurement(
                c.measured_compute, k.ctx, k.parallel, c.compute - c.predicted_compute
            )
            for k, c in self.by_key.items()
            if replace(k, ctx=0, parallel=base.n_seq) == probe
        }
        if not family:
            return None

        def measurement(n_ctx: int, n_seq: int) -> Measurement | None:
            own = family.get((n_ctx, n_seq))
            if own is not None:
                return own
            nearest = min(family, key=lambda f: (abs(f[1] - n_seq), abs(f[0] - n_ctx), f))
            return family[nearest]

        return measurement


def measurements_for(model: GgufModel, engine_version: EngineVersion) -> MeasuredCompute | None:
    """What the store measured for ``model`` under ``engine_version``; None when nothing.

    ``engine_version`` may be a function: it is called only when the store holds a record
    of this model (finding the engine's version can mean running it).
    """
    stored = _read(store_path())
    if not stored:
        return None
    identity = model_identity(model)
    stored = [c for c in stored if c.key.model == identity]
    version = engine_version() if callable(engine_version) and stored else engine_version
    if not stored or not version or not isinstance(version, str):
        return None
    by_key = {c.key: c for c in stored if c.key.engine_version == version}
    return MeasuredCompute(identity, version, by_key) if by_key else None
