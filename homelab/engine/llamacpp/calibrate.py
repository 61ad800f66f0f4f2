"""Calibration from a real run: measure llama-server's load log against the plan, store it.

The store and the lookup a plan consults live in :mod:`homelab.plan.calibration` (the
planner never imports the engine); what needs the engine (its load log, its actuals,
its version) is here. :func:`current_engine_version` is what the llama.cpp kind's plan and
the application layer's judging (:mod:`homelab.serve.judge`) pass to ``plan_model`` so the
plan consults this build's measurements.
"""

from __future__ import annotations

import time
from pathlib import Path

from homelab.engine.llamacpp.actuals import compare, row
from homelab.engine.llamacpp.log import LoadLog
from homelab.gguf.header import GgufModel
from homelab.plan.calibration import Calibration, CalibrationError, save
from homelab.plan.calibration_key import CalibrationKey, key_for
from homelab.plan.planner import Plan
from homelab.plan.vocabulary import slot_count


def current_engine_version() -> str | None:
    """The version tag of the llama-server homelab would run, or None when there is none."""
    from homelab.engine.llamacpp.locate import engine_version, find_llama_server
    from homelab.errors import EngineError

    try:
        return engine_version(find_llama_server())
    except EngineError:
        return None


def _logged(rows: tuple, name: str) -> int | None:
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
            f"the engine ran with n_ctx {ctx.n_ctx}, {_slots(ctx.n_seq_max)}, ubatch {ctx.n_ubatch}; "
            f"the plan has n_ctx {planned[0]}, {slot_count(planned[1])}, ubatch {planned[2]}",
            hint="The figures belong to other flags than the plan's; run the plan's argv unchanged.",
        )
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
    A plan that keeps experts in RAM is keyed with its ``--n-cpu-moe`` too.

    ``model`` is the plan's parsed model when the caller has it (else it is read again
    from ``plan.model_path``).

    Raises:
        CalibrationError: the engine version is unknown, the plan is split over several
            devices, nothing was measured (see
            :func:`measure`), or the store cannot be written.
        ModelFileError: ``model`` was not given and ``plan.model_path`` cannot be read.
    """
    if not engine_version:
        raise CalibrationError(
            "the engine's version is unknown, so the measurement cannot be tied to it",
            hint="Check that `llama-server --version` runs.",
        )
    if plan.split:  # its compute buffers are per device; one sum would misprice one card
        raise CalibrationError(
            "a plan split over several devices is not remembered: the store keeps one "
            "card's compute buffer, and the log's are per device",
            hint="Nothing to do: the estimate is used for split plans.",
        )
    if model is None:
        from homelab.gguf.model_file import read_model

        model = read_model(plan.model_path)
    calibration = measure(plan, load_log, key_for(plan, model, engine_version))
    save(calibration, path)
    return calibration


def _slots(logged: int | None) -> str:
    """The slots the engine logged, in the plan's words (``? slots`` when the log had none)."""
    return "? slots" if logged is None else slot_count(logged)
