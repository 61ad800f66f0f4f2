"""The models menu's rows and how a verdict reads on screen (presentation only).

A row is a preset, a GGUF in the Hugging Face cache or one in a models folder. Its
verdict comes from the domain's plan (or the preset's fit); this module only words it:
``fits: 98,304 tokens, 3 slots`` / ``partial: -ngl 20`` / ``does not fit: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from homelab.units import format_bytes, format_int

if TYPE_CHECKING:
    from homelab.hub.presets import Preset
    from homelab.plan.judge import Fit
    from homelab.plan.planner import Plan

Source = Literal["preset", "cache", "dir"]


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One row of the menu."""

    key: str
    """Unique: ``preset:KEY`` or the file's path."""
    name: str
    quant: str | None
    source: Source
    path: Path | None = None
    """The local GGUF (None for a preset not in the cache yet)."""
    preset: Preset | None = None
    """The preset behind a preset row."""
    size: int | None = None


@dataclass(frozen=True, slots=True)
class Judgement:
    """A row's verdict, already worded."""

    verdict: str
    """``fits`` / ``partial`` / ``does_not_fit`` / ``unknown``."""
    text: str
    size: int | None = None
    detail: str | None = None
    from_preset: bool = False
    """Planned from the preset's facts: the model's header has not been read yet."""


def judgement_of_plan(plan: Plan, size: int | None) -> Judgement:
    """The words for a plan's verdict."""
    if plan.verdict == "partial":
        return Judgement("partial", f"partial: -ngl {plan.n_gpu_layers}", size)
    slots = plan.settings.n_seq
    tokens = plan.candidate.allocation.n_ctx
    text = f"fits: {format_int(tokens)} tokens, {slots} slot{'s' if slots != 1 else ''}"
    return Judgement("fits", text, size)


FROM_PRESET = " †"
"""Marks a verdict planned from a preset's own facts until its header has been read."""
FROM_PRESET_LEGEND = "† from the preset (header not read yet)"
"""What the mark means, shown with the menu while a row carries it."""


def judgement_of_fit(fit: Fit, source: str | None = "header") -> Judgement:
    """The words for a verdict.

    ``source`` is ``PresetFit.source``: ``"preset"`` adds :data:`FROM_PRESET`.
    """
    judgement = _words(fit)
    if source != "preset":
        return judgement
    text = judgement.text + FROM_PRESET
    return Judgement(judgement.verdict, text, judgement.size, judgement.detail, from_preset=True)


def _words(fit: Fit) -> Judgement:
    if fit.plan is not None:
        return judgement_of_plan(fit.plan, fit.file_bytes)
    if fit.verdict == "does_not_fit":
        text = "does not fit"
        if fit.short_by is not None and fit.short_by > 0:
            text += f": short by {format_bytes(fit.short_by, precision=1)}"
        return Judgement("does_not_fit", text, fit.file_bytes, fit.reason)
    return Judgement(
        "unknown", f"unknown: {fit.problem or 'no header'}", fit.file_bytes, fit.reason
    )


def size_text(size: int | None) -> str:
    return "?" if size is None else format_bytes(size, precision=1)


def matches(entry: ModelEntry, query: str) -> bool:
    """Whether the filter text names this row (every word, case-insensitive)."""
    haystack = f"{entry.name} {entry.quant or ''} {entry.source}".lower()
    return all(word in haystack for word in query.lower().split())
