"""Judge a model on a card: the one verdict ``plan``, ``quants``, ``presets`` and the TUI show.

:func:`judge` takes a model's header (or the :class:`~homelab.errors.HomelabError`
that says why there is none), plans it with :func:`~homelab.plan.pipeline.plan_model`
(calibration consulted inside) and returns a :class:`Fit`: fits / partial /
does_not_fit / unknown, the plan when there is one, else the reason. It never raises
for the model's own trouble; a listing of many models keeps going.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from homelab.errors import DoesNotFitError, HomelabError
from homelab.gguf.header import GgufModel
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.calibration import EngineVersion
from homelab.plan.choose import wanted_per_slot
from homelab.plan.experts_rung import system_ram
from homelab.plan.options import PlanOptions
from homelab.plan.pipeline import plan_model
from homelab.plan.planner import Plan
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.workload import AGENT, Workload

Verdict = Literal["fits", "partial", "does_not_fit", "unknown"]
"""fits: on the card; partial: layers spill to the CPU; does_not_fit: nothing worth serving;
unknown: no header, or one homelab cannot size or plan."""


@dataclass(frozen=True, slots=True)
class Fit:
    """One model judged on one card."""

    label: str
    workload: Workload
    verdict: Verdict
    plan: Plan | None = None
    """The plan behind fits / partial; None otherwise."""
    reason: str | None = None
    """Why does_not_fit / unknown: the error's message (with its numbers)."""
    problem: str | None = None
    """The short title of that reason (the error's), e.g. "Offline"."""
    hint: str | None = None
    """What would help, naming the setting (the error's hint)."""
    file_bytes: int | None = None
    """Size of the model's file(s) when the source said; None when unknown."""
    weights_bytes: int | None = None
    """Tensor bytes the header describes; None without a header (or one that cannot be sized)."""
    short_by: int | None = None
    """does_not_fit: the bytes missing for the least that would run (None: not said)."""
    error: HomelabError | None = field(default=None, compare=False, repr=False)
    """The error behind does_not_fit / unknown (its class says the exit code), for a
    front-end that reports one model's failure as its own (``homelab plan``)."""

    @property
    def explanation(self) -> str | None:
        """``Problem: reason. Hint`` on one line (a table's footnote); None with a plan."""
        if self.reason is None:
            return None
        text = f"{self.problem}: {self.reason}".rstrip() if self.problem else self.reason
        if self.hint is None:
            return text
        return f"{text}{'' if text.endswith(('.', '!', '?')) else '.'} {self.hint}"

    @property
    def tokens_fit(self) -> int | None:
        """Total tokens of context that fit at the plan's slot count; None without a plan."""
        return self.plan.tokens_fit if self.plan else None

    @property
    def slots(self) -> int | None:
        """Conversations (llama-server slots) the plan runs; None without a plan."""
        return self.plan.settings.n_seq if self.plan else None

    @property
    def ctx_per_slot(self) -> int | None:
        return self.plan.candidate.allocation.ctx_per_slot if self.plan else None

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self.plan.candidate.allocation.bytes_per_token if self.plan else None

    @property
    def wanted_per_slot(self) -> int | None:
        """Tokens one conversation of the workload needs, padded and capped at the trained
        context as the planner does; None without a plan."""
        if self.plan is None:
            return None
        return wanted_per_slot(self.plan.request, self.plan.geometry, [])

    @property
    def full_slots(self) -> int:
        """Slots that hold the workload's whole conversation; 0 when none do (or no plan)."""
        wanted = self.wanted_per_slot
        if self.plan is None or wanted is None or (self.ctx_per_slot or 0) < wanted:
            return 0
        return self.plan.settings.n_seq


def judge(
    model: GgufModel | HomelabError,
    label: str,
    report: GpuReport,
    options: PlanOptions,
    *,
    default_workload: Workload | None = None,
    engine_version: EngineVersion = None,
    remote: tuple[RemoteDevice, ...] = (),
    ram: Callable[[], CpuMemory | None] = system_ram,
) -> Fit:
    """``model`` (shown as ``label``) planned on ``report``'s card with ``options``.

    ``default_workload`` (e.g. a preset's hint) applies when ``options.workload.per_slot`` is None;
    ``engine_version`` (calibration), ``remote`` (RPC devices) and ``ram`` (system RAM) are passed to
    :func:`~homelab.plan.pipeline.plan_model`.
    Never raises for one model's trouble: an error instead of a header, or a header that
    cannot be sized or planned, gives ``unknown``; a plan that cannot fit ``does_not_fit``.
    """
    workload = options.workload.per_slot or default_workload or AGENT
    if isinstance(model, HomelabError):
        return _failed(label, workload, "unknown", model, None)
    try:
        plan = plan_model(
            model,
            label,
            report,
            options,
            default_workload=default_workload,
            engine_version=engine_version,
            remote=remote,
            ram=ram,
        )
    except DoesNotFitError as error:
        return _failed(label, workload, "does_not_fit", error, model)
    except HomelabError as error:
        return _failed(label, workload, "unknown", error, model)
    return Fit(
        label,
        plan.request.workload,
        plan.verdict,
        plan,
        file_bytes=_file_bytes(model),
        weights_bytes=model.weights_bytes,
    )


def _failed(
    label: str, workload: Workload, verdict: Verdict, error: HomelabError, model: GgufModel | None
) -> Fit:
    return Fit(
        label,
        workload,
        verdict,
        reason=error.message,
        problem=error.title,
        hint=error.hint,
        file_bytes=_file_bytes(model) if model is not None else None,
        weights_bytes=model.weights_bytes if model is not None else None,
        short_by=error.short_by if isinstance(error, DoesNotFitError) else None,
        error=error,
    )


def _file_bytes(model: GgufModel) -> int | None:
    sizes = [part.file_size for part in model.parts]
    known = [size for size in sizes if isinstance(size, int)]
    return sum(known) if len(known) == len(sizes) else None
