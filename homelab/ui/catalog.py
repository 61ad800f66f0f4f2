"""The models menu's rows and how a verdict reads on screen (presentation only).

A row is a preset, a GGUF in the Hugging Face cache or one in a models folder. Its
verdict comes from the domain's plan (or the preset's fit); this module only words it:
``fits: 3 slots × 32,768 tokens allocated`` / ``fits: 2 slots × 131,072 tokens allocated,
experts of 14 layers in RAM (9.80 GiB)`` / ``partial: -ngl 30, 19 of 48 layers on the CPU`` /
``does not fit: ...``, in the words of :mod:`homelab.plan.vocabulary` (``homelab plan`` and
``homelab presets`` use the same). Each verdict also has a compact form (``fits: 2×131k,
experts in RAM``: slots × tokens allocated, as ``homelab presets`` writes them) for a column too narrow for the whole one (:func:`fitted`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from rich.cells import cell_len

from homelab.plan.placement import plan_ram
from homelab.plan.vocabulary import TRAINED_CAP, allocated_words, capped_at_trained
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
    compact: str | None = None
    """The same verdict in fewer cells, for a narrow column (None: ``text`` is short)."""


def judgement_of_plan(plan: Plan, size: int | None) -> Judgement:
    """The words for a plan's verdict."""
    text, compact = plan_words(plan)
    return Judgement(plan.verdict, text, size, compact=compact)


def plan_words(plan: Plan) -> tuple[str, str]:
    """A plan's verdict, whole and compact: the tokens and slots it gives, and which weights
    it keeps off the card (the routed experts of N layers in RAM, or whole layers on the CPU),
    as the domain's plan and its RAM share say."""
    ram = plan_ram(plan)
    if plan.verdict == "partial":
        n_blocks = len(plan.weights.per_block)
        on_cpu = n_blocks - sum(share.n_blocks for share in plan.devices)
        text = f"partial: -ngl {plan.n_gpu_layers}, {on_cpu} of {n_blocks} layers on the CPU"
        compact = f"partial: -ngl {plan.n_gpu_layers}"
    else:
        per_slot = plan.candidate.allocation.ctx_per_slot
        text = f"fits: {allocated_words(plan)}"
        compact = f"fits: {plan.settings.n_seq}×{_thousands(per_slot)}"
        if capped_at_trained(plan):
            compact += f" ({TRAINED_CAP})"
    if ram is not None:
        layers = "1 layer" if ram.n_cpu_moe == 1 else f"{ram.n_cpu_moe} layers"
        text += f", experts of {layers} in RAM ({format_bytes(ram.experts)})"
        compact += ", experts in RAM"
    return text, compact


def _thousands(tokens: int) -> str:
    """``262,144`` as ``262k``, ``1,701,632`` as ``1.7M`` (a compact verdict's count, rounded
    down so it never promises more; the whole one has every digit)."""
    if tokens >= 1_000_000:
        millions, tenths = divmod(tokens // 100_000, 10)
        return f"{millions}.{tenths}M"
    return f"{tokens // 1000}k" if tokens >= 10_000 else format_int(tokens)


ELLIPSIS = "…"


def fitted(judgement: Judgement, width: int) -> str:
    """The judgement's words in at most ``width`` cells, never cut inside a word or a number:
    the whole text when it fits, else the compact one, else the compact one's leading
    clauses (``fits: 262k × 2 …``), else the verdict's own word (``fits``, ``partial``,
    ``does not fit``); the preset's mark kept at the end while there is room for it."""
    for words in (judgement.text, judgement.compact):
        if words is not None and cell_len(words) <= width:
            return words
    words = judgement.compact or judgement.text
    mark = FROM_PRESET if words.endswith(FROM_PRESET) else ""
    bare = words.removesuffix(mark)
    for kept in _leading_clauses(bare):
        cut = kept + " " + ELLIPSIS + mark
        if cell_len(cut) <= width:
            return cut
    head = bare.split(":", 1)[0]
    for cut in (head + mark, head):
        if cell_len(cut) <= width:
            return cut
    return head[: max(width, 1)]


def _leading_clauses(words: str) -> list[str]:
    """The words cut at each clause's end, longest first: a clause ends before ``, `` and
    before a parenthesis (``fits: 32×8,192 (trained cap)`` → ``fits: 32×8,192``)."""
    ends = [i for i in range(len(words)) if words.startswith((", ", " ("), i)]
    return [words[:end] for end in reversed(ends) if end > 0]


PRESET_MARK = " ★"
"""Marks a preset's row (a model named by ``homelab presets``), not a file found on disk."""
PRESET_LEGEND = "★ a preset (homelab presets)"
"""What the star means, shown with the menu while a preset's row is listed."""

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
    compact = judgement.compact + FROM_PRESET if judgement.compact else None
    return Judgement(
        judgement.verdict, text, judgement.size, judgement.detail, True, compact=compact
    )


def _words(fit: Fit) -> Judgement:
    if fit.plan is not None:
        return judgement_of_plan(fit.plan, fit.file_bytes)
    if fit.verdict == "does_not_fit":
        text = "does not fit"
        if fit.short_by is not None and fit.short_by > 0:
            text += f": short by {format_bytes(fit.short_by)}"
        return Judgement("does_not_fit", text, fit.file_bytes, fit.reason)
    return Judgement(
        "unknown", f"unknown: {fit.problem or 'no header'}", fit.file_bytes, fit.reason
    )


def size_text(size: int | None) -> str:
    return "?" if size is None else format_bytes(size)


def matches(entry: ModelEntry, query: str) -> bool:
    """Whether the filter text names this row (every word, case-insensitive)."""
    haystack = f"{entry.name} {entry.quant or ''} {entry.source}".lower()
    return all(word in haystack for word in query.lower().split())
