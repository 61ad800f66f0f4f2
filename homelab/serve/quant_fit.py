"""Which quant to pick: every GGUF model of a repo judged on this card.

Each quant (split parts grouped) is read from its header, never downloaded (the HF
cache, homelab's header cache, or range requests; see ``homelab.hub.model_ref``), and
judged with :func:`homelab.plan.judge.judge` under the same options as ``homelab plan``:
fits / partial / does not fit / unknown, the slots of the workload and the tokens that fit.

The best choice is the largest quant (by file size: fewer bits thrown away) that fits
on the card with at least one *full* workload slot (the workload's tokens per
conversation, capped at the model's trained context). A bigger one that fits only with
a shortened conversation, or spills layers to the CPU, is worse in use than a slightly
smaller quant that serves the workload whole.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from homelab.engine.llamacpp.calibrate import current_engine_version
from homelab.errors import HomelabError
from homelab.gpu.report import GpuReport
from homelab.plan.calibration import EngineVersion
from homelab.plan.judge import Fit, judge
from homelab.plan.options import PlanOptions

if TYPE_CHECKING:
    from homelab.hub.header_cache import HeaderCache
    from homelab.hub.model_ref import RepoListing, ResolvedModel
    from homelab.hub.quant_match import QuantChoice

HEADER_WORKERS = 4
"""Headers read at once (each is a few round trips; a repo has ~10-25 quants)."""


@dataclass(frozen=True, slots=True)
class QuantFit:
    """One quant of the repo and its verdict on the card."""

    choice: QuantChoice
    fit: Fit
    header_origin: str | None = None
    """Where the headers came from: hf-cache, header-cache, remote (or several, joined)."""
    bytes_fetched: int = 0

    @property
    def label(self) -> str:
        return self.choice.label

    @property
    def size(self) -> int | None:
        """The quant's file size(s) as the repo listing says."""
        return self.choice.size


def fit_quants(
    listing: RepoListing,
    report: GpuReport,
    options: PlanOptions,
    *,
    cache: HeaderCache | None = None,
    workers: int = HEADER_WORKERS,
    engine_version: EngineVersion = current_engine_version,
) -> list[QuantFit]:
    """Judge every quant of ``listing`` on the card in ``report``; smallest file first.

    Raises:
        QuantNotFoundError: the repo has no GGUF model files.
        HubAuthError, HubNetworkError: the Hub refused or could not be reached (true of
            every quant, so the listing stops there). Other trouble with one quant (its
            header not cached offline, a bad header) gives that quant ``unknown``.
    """
    from homelab.hub.errors import QuantNotFoundError
    from homelab.hub.header_cache import HeaderCache
    from homelab.hub.model_ref import read_choice
    from homelab.hub.quant_match import available_quants

    choices = sorted(available_quants(listing.files), key=lambda c: (c.size or 0, c.label))
    if not choices:
        raise QuantNotFoundError(
            f"{listing.repo} has no GGUF model files (llama-server loads only GGUF)",
            available=[],
            hint="Look for a repo of GGUF quants (often named ...-GGUF).",
        )
    cache = cache or HeaderCache()

    def read(choice: QuantChoice) -> ResolvedModel | HomelabError:
        try:
            return read_choice(listing, choice, cache=cache)
        except HomelabError as error:
            return error

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(choices)))) as pool:
        resolved = list(pool.map(read, choices))
    return [
        _judge(choice, result, report, options, engine_version)
        for choice, result in zip(choices, resolved, strict=True)
    ]


def _judge(
    choice: QuantChoice,
    resolved: ResolvedModel | HomelabError,
    report: GpuReport,
    options: PlanOptions,
    engine_version: EngineVersion,
) -> QuantFit:
    from homelab.hub.errors import HubAuthError, HubNetworkError

    if isinstance(resolved, (HubAuthError, HubNetworkError)):
        raise resolved
    if isinstance(resolved, HomelabError):
        return QuantFit(choice, judge(resolved, choice.label, report, options))
    fit = judge(resolved.model, resolved.display, report, options, engine_version=engine_version)
    origins = sorted({p.origin for p in resolved.parts})
    return QuantFit(choice, fit, "+".join(origins), resolved.bytes_fetched)


def pick_best(fits: list[QuantFit]) -> QuantFit | None:
    """The largest quant that fits on the card with at least one full workload slot."""
    good = [f for f in fits if f.fit.verdict == "fits" and f.fit.full_slots >= 1]
    return max(good, key=lambda f: (f.size or 0, f.label)) if good else None


def explain(fits: list[QuantFit], best: QuantFit | None, workload_name: str) -> str:
    """One sentence: why ``best`` (and not the next larger quant), or why there is none."""
    if best is None:
        fitting = [f for f in fits if f.fit.plan is not None and f.fit.verdict == "fits"]
        if fitting:
            most = max(fitting, key=lambda f: f.fit.ctx_per_slot or 0)
            return (
                f"No quant fits with a whole conversation of the {workload_name} workload "
                f"({most.fit.wanted_per_slot:,} tokens); the most is {most.label}'s "
                f"{most.fit.ctx_per_slot:,} tokens per slot."
            )
        return f"No quant fits on this card for the {workload_name} workload."
    why = (
        f"{best.label} is the largest quant that fits with whole conversations of the "
        f"{workload_name} workload ({best.fit.full_slots} slot(s) × {best.fit.ctx_per_slot:,} tokens)"
    )
    bigger = sorted(
        (f for f in fits if (f.size or 0) > (best.size or 0)), key=lambda f: f.size or 0
    )
    if not bigger:
        return why + "; it is the largest quant in the repo."
    return f"{why}; the next larger, {bigger[0].label}, {_shortfall(bigger[0].fit)}."


def _shortfall(fit: Fit) -> str:
    if fit.verdict == "fits":
        return f"fits only {fit.ctx_per_slot:,} of the {fit.wanted_per_slot:,} tokens a conversation needs"
    if fit.verdict == "partial":
        return "does not fit on the card (layers would run on the CPU)"
    if fit.verdict == "does_not_fit":
        return "does not fit"
    return f"could not be judged ({fit.reason})"
