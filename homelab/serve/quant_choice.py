"""Which quant of a repo to download for this card: the one pass ``homelab quants REPO`` and
the TUI's download chooser both make, so the two cannot rank or word a quant differently.

List the repo (:func:`homelab.hub.model_ref.list_repo`), judge every quant from its header
on the card (:func:`homelab.serve.quant_fit.fit_quants`), rank them
(:func:`homelab.serve.quant_rank.ranked`) and say why the best one
(:func:`homelab.serve.quant_rank.explain`). The front-ends only lay the result out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from homelab.plan.vocabulary import VERDICT_WORDS
from homelab.plan.workload import AGENT, Workload

if TYPE_CHECKING:
    from homelab.gpu.report import GpuReport
    from homelab.hub.model_ref import RepoListing
    from homelab.plan.options import PlanOptions
    from homelab.serve.quant_fit import QuantFit


@dataclass(frozen=True, slots=True)
class QuantsOnCard:
    """Every quant of one repo judged on one card for one workload, and the ranking."""

    listing: RepoListing
    fits: list[QuantFit]
    """Every quant, smallest file first (unknown sizes first)."""
    order: list[QuantFit]
    """The quants that serve the workload, best first; the rest are left out."""
    why: str
    """One sentence: why the best one, or why there is none."""
    workload: Workload
    device: str
    """The card (or system RAM) it was judged on, by name."""

    @property
    def best(self) -> QuantFit | None:
        """The first of :attr:`order`; None when no quant serves the workload."""
        return self.order[0] if self.order else None


def quants_on_card(
    repo: str,
    revision: str,
    options: PlanOptions,
    *,
    report: GpuReport | None = None,
    default_workload: Workload = AGENT,
) -> QuantsOnCard:
    """Judge and rank every GGUF quant of ``repo`` at ``revision`` (headers only: nothing is
    downloaded) on ``report`` (None: the card ``options`` say). ``default_workload`` (a
    preset's own) is what each slot is planned for when ``options`` name no workload.

    Raises:
        HubAuthError, HubNotFoundError, HubNetworkError, HubOfflineError: the listing could
            not be had (see :func:`homelab.hub.model_ref.list_repo`).
        QuantNotFoundError: the repo has no GGUF model files.
    """
    from homelab.hub.model_ref import list_repo
    from homelab.plan.budget import device_budget
    from homelab.plan.card import card_for
    from homelab.serve.quant_fit import fit_quants
    from homelab.serve.quant_rank import explain, ranked

    workload = options.workload.per_slot or default_workload
    options = replace(options, workload=replace(options.workload, per_slot=workload))
    listing = list_repo(repo, revision)
    report = report if report is not None else card_for(options)
    gpu = options.card.gpu
    device = " + ".join(
        device_budget(report, i).name for i in (gpu if isinstance(gpu, tuple) else (gpu,))
    )
    fits = fit_quants(listing, report, options)
    order = ranked(fits)
    why = explain(fits, order[0] if order else None, workload.name)
    return QuantsOnCard(listing, fits, order, why, workload, device)


def verdict_words(quant: QuantFit) -> str:
    """The quant's verdict as the ``FIT`` column of ``homelab quants`` words it."""
    return VERDICT_WORDS[quant.fit.verdict]


def download_ref(listing: RepoListing, quant: QuantFit) -> str:
    """The reference that downloads exactly this quant (all its parts): its first file by
    path at the listing's revision, ``owner/name[@REV]/FILE.gguf``, as ``homelab pull``
    takes it (a quant tag could match another file; a path cannot)."""
    from homelab.hub.model_ref import DEFAULT_REVISION

    at = "" if listing.revision == DEFAULT_REVISION else f"@{listing.revision}"
    return f"{listing.repo}{at}/{quant.choice.primary.path}"
