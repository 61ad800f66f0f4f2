"""Calibration: llama-server's measured buffers, remembered per (model, engine, flags).

llama.cpp has no closed form for its compute buffer (it reserves the worst-case
graph and measures it), so the plan's figure is an estimate until a run logs the
real one. After a run, :func:`record` stores what the load log measured; the next
plan for the same model, engine version and compute-relevant flags uses it
(:func:`apply_calibration` re-plans with ``PlanRequest.measured_compute``, and
the plan's working then says "measured").

The key (model, engine version, compute-relevant flags) is
:class:`~homelab.plan.calibration_key.CalibrationKey`.

Records live in ``state_dir()/calibration.json``, written atomically under a
lock. A file that cannot be read as a calibration store is renamed aside
(``calibration.json.corrupt-<time>``) with a warning and treated as empty: a
broken cache never stops a plan.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.errors import HomelabError
from homelab.gguf.header import GgufModel
from homelab.gpu.report import GpuReport
from homelab.paths import state_dir
from homelab.plan.calibration_key import (
    CalibrationKey,
    key_for,
    key_from_dict,
    model_identity,
)
from homelab.plan.planner import Plan, make_plan

if TYPE_CHECKING:  # the load-log parser is needed to record, not to plan (start-up time)
    from homelab.engine.llamacpp.log import LoadLog

try:  # POSIX: serialise read-modify-write between homelab processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

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
    counts = (key.ctx, key.parallel, key.ubatch, key.batch, key.model.size)
    optional = (calibration.model, calibration.kv, calibration.recurrent, calibration.output)
    if (
        not all(_is_int(v) and v >= 0 for v in (*sizes, *counts))
        or not all(v is None or _is_int(v) for v in (*optional, key.n_gpu_layers))
        or not all(isinstance(v, bool) for v in (key.flash_attn, key.unified))
    ):
        raise ValueError(f"a record with wrong value types: {str(data)[:120]}")
    return calibration


def _move_aside(path: Path, reason: str) -> None:
    import logging  # only for a broken store (start-up time)

    log = logging.getLogger(__name__)
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    try:
        os.replace(path, aside)
    except OSError as error:
        log.warning(
            "homelab: %s is unreadable (%s) and could not be moved aside: %s", path, reason, error
        )
        return
    log.warning(
        "homelab: %s was unreadable (%s); moved it to %s and started afresh",
        path,
        reason,
        aside.name,
    )


def _read(path: Path) -> list[Calibration]:
    """Every record in the store; [] when there is none; a corrupt file is moved aside."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        _move_aside(path, str(error))
        return []
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a schema-{SCHEMA} calibration store")
        return [_calibration_from_dict(item) for item in data["records"]]
    except (ValueError, KeyError, TypeError) as error:
        _move_aside(path, f"{type(error).__name__}: {error}")
        return []


def _write(path: Path, records: list[Calibration]) -> None:
    """Replace the store atomically (temporary file in the same folder, fsync, rename)."""
    data = {"schema": SCHEMA, "records": [asdict(r) for r in records[-MAX_RECORDS:]]}
    import tempfile  # only to write: a plan that finds no record never needs it (start-up)

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    with open(path.with_name(f".{path.name}.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def records(path: Path | None = None) -> list[Calibration]:
    """Every stored record, oldest first."""
    return _read(path or store_path())


def lookup(key: CalibrationKey, path: Path | None = None) -> Calibration | None:
    """The newest record for exactly ``key``, or None."""
    found = [c for c in records(path) if c.key == key]
    return found[-1] if found else None


def _logged(rows: tuple, name: str) -> int | None:
    from homelab.engine.llamacpp.actuals import row

    r = row(rows, name)
    return None if r is None else r.actual


def measure(plan: Plan, load_log: LoadLog, key: CalibrationKey) -> Calibration:
    """The calibration a load log gives for ``plan`` (nothing stored).

    Raises:
        CalibrationError: the log has no compute buffer line for the plan's device, or its
            context (n_ctx, slots, micro-batch) is not the plan's, so the figures belong to
            other flags.
    """
    ctx = load_log.context
    s = plan.settings
    logged = (ctx.n_ctx, ctx.n_seq_max, ctx.n_ubatch)
    planned = (
        plan.candidate.allocation.n_ctx,
        s.n_seq,
        min(s.n_ubatch, s.n_batch, plan.candidate.allocation.n_ctx),
    )
    if any(v is not None and v != p for v, p in zip(logged, planned, strict=True)):
        raise CalibrationError(
            f"the engine ran with n_ctx {ctx.n_ctx}, {ctx.n_seq_max} slot(s), ubatch {ctx.n_ubatch}; "
            f"the plan has n_ctx {planned[0]}, {planned[1]} slot(s), ubatch {planned[2]}",
            hint="The figures belong to other flags than the plan's; run the plan's argv unchanged.",
        )
    from homelab.engine.llamacpp.actuals import compare

    rows = compare(plan, load_log)
    compute = _logged(rows, "compute")
    if compute is None:
        where = "the GPU" if plan.on_gpu else "the CPU"
        raise CalibrationError(
            f"the load log has no compute buffer line for {where}",
            hint="Run llama-server with -lv 4 (the plan's argv does) and record after it is ready.",
        )
    engine = plan.candidate.engine
    return Calibration(
        key=key,
        compute=compute,
        measured_compute=max(compute - engine.fa_scratch, 0),
        predicted_compute=engine.compute_buffer,
        model=_logged(rows, "weights"),
        kv=_logged(rows, "KV"),
        recurrent=_logged(rows, "recurrent"),
        output=_logged(rows, "output"),
        recorded_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )


def record(
    plan: Plan,
    load_log: LoadLog,
    engine_version: str | None,
    *,
    model: GgufModel | None = None,
    path: Path | None = None,
) -> Calibration:
    """Measure ``load_log`` against ``plan`` and store it, replacing the record of the same key.

    ``model`` is the plan's parsed model when the caller has it (else it is read again
    from ``plan.model_path``).

    Raises:
        CalibrationError: the engine version is unknown, nothing was measured (see
            :func:`measure`), or the store cannot be written.
        ModelFileError: ``model`` was not given and ``plan.model_path`` cannot be read.
    """
    if not engine_version:
        raise CalibrationError(
            "the engine's version is unknown, so the measurement cannot be tied to it",
            hint="Check that `llama-server --version` runs.",
        )
    if model is None:
        from homelab.gguf.model_file import read_model

        model = read_model(plan.model_path)
    calibration = measure(plan, load_log, key_for(plan, model, engine_version))
    save(calibration, path)
    return calibration


def save(calibration: Calibration, path: Path | None = None) -> None:
    """Store ``calibration``, replacing any record of the same key (atomic, under a lock).

    Raises:
        CalibrationError: the store cannot be written.
    """
    target = path or store_path()
    try:
        with _locked(target):
            kept = [c for c in _read(target) if c.key != calibration.key]
            _write(target, [*kept, calibration])
    except OSError as error:
        raise CalibrationError(
            f"cannot write {target}: {error.strerror or error}",
            hint="Check that the homelab state folder is writable (HOMELAB_STATE_DIR).",
        ) from None


# -- planning with it ------------------------------------------------------------------


def current_engine_version() -> str | None:
    """The version tag of the llama-server homelab would run, or None when there is none."""
    from homelab.engine.llamacpp.locate import engine_version, find_llama_server
    from homelab.errors import EngineError

    try:
        return engine_version(find_llama_server())
    except EngineError:
        return None


def apply_calibration(
    plan: Plan,
    model: GgufModel,
    report: GpuReport,
    engine_version: str | None | Callable[[], str | None] = current_engine_version,
    *,
    path: Path | None = None,
) -> Plan:
    """``plan`` re-made with the compute buffer an earlier run measured for its flags.

    Returns ``plan`` unchanged when nothing was measured for this model, engine and flags
    (or the request already carries a measured figure). ``engine_version`` may be a
    function: it is only called when the store holds a record of this model.

    When the measured figure moves the plan to other flags (a larger buffer leaves room
    for fewer tokens), the record of those flags is used if there is one; otherwise the
    plan keeps the neighbouring measurement and says so in its warnings.
    """
    if plan.request.measured_compute is not None:
        return plan
    target = path or store_path()
    stored = _read(target)
    if not stored:
        return plan
    identity = model_identity(model)
    stored = [c for c in stored if c.key.model == identity]
    version = engine_version() if callable(engine_version) else engine_version
    if not stored or not version:
        return plan
    by_key = {c.key: c for c in stored}
    calibration = by_key.get(key_for(plan, identity, version))
    if calibration is None:
        return plan
    for _ in range(3):  # a measurement may move the plan to flags with a measurement of their own
        used = calibration
        request = replace(plan.request, measured_compute=used.measured_compute)
        planned = make_plan(model, plan.model_path, report, request)
        moved_to = key_for(planned, identity, version)
        if moved_to == used.key:
            return planned
        if moved_to not in by_key:
            break
        calibration = by_key[moved_to]
    k = used.key
    note = (
        f"The compute buffer was measured at -c {k.ctx} -np {k.parallel}; with it the plan moved to "
        f"-c {planned.candidate.allocation.n_ctx} -np {planned.settings.n_seq}, which no run has measured yet."
    )
    return replace(planned, warnings=(*planned.warnings, note))
