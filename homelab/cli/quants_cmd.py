"""``homelab quants REPO``: which quant to pick, every GGUF model of a repo planned on this card.

Each quant (split parts grouped) is planned from its header, never downloaded (the HF
cache, homelab's header cache, or range requests; see ``homelab.hub.model_ref``), with
the same options as ``homelab plan``: fits / partial / does not fit, the slots of the
workload and the tokens that fit.

The best choice is the largest quant (by file size: fewer bits thrown away) that fits
on the card with at least one *full* workload slot (the workload's tokens per
conversation, capped at the model's trained context). A bigger one that fits only with
a shortened conversation, or spills layers to the CPU, is worse in use than a slightly
smaller quant that serves the workload whole.

Exit codes: 0 when a best choice exists, 3 when no quant fits with a full slot.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from homelab.cli.common import print_json
from homelab.cli.plan_cmd import add_plan_arguments, report_from_args, request_from_args
from homelab.errors import DoesNotFitError, ExitCode, HomelabError, UsageError
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.gpu.report import GpuReport
    from homelab.hub.header_cache import HeaderCache
    from homelab.hub.model_ref import RepoListing, ResolvedModel
    from homelab.hub.quant_match import QuantChoice
    from homelab.plan.planner import Plan, PlanRequest

Verdict = Literal["fits", "partial", "does_not_fit", "unknown"]
HEADER_WORKERS = 4
"""Headers read at once (each is a few round trips; a repo has ~10-25 quants)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "quants",
        help="which quant of a Hugging Face GGUF repo to pick for this card",
        description="Plan every GGUF quant of REPO on this card from its header (nothing is "
        "downloaded) and mark the largest that fits with a full workload slot.",
    )
    parser.add_argument("repo", help="owner/name[@REVISION] of a GGUF repo")
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object, sizes in bytes")
    parser.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class QuantFit:
    """One quant of the repo judged on the card."""

    choice: QuantChoice
    verdict: Verdict
    plan: Plan | None = None
    """The ``Plan`` behind fits / partial; None otherwise."""
    wanted_per_slot: int = 0
    """Tokens one conversation of the workload needs (capped at the trained context)."""
    header_origin: str | None = None
    """Where the headers came from: hf-cache, header-cache, remote (or several, joined)."""
    bytes_fetched: int = 0
    reason: str | None = None

    @property
    def label(self) -> str:
        return self.choice.label

    @property
    def size(self) -> int | None:
        return self.choice.size

    @property
    def ctx_per_slot(self) -> int | None:
        return self.plan.candidate.allocation.ctx_per_slot if self.plan else None

    @property
    def full_slots(self) -> int:
        """Slots that hold the workload's whole conversation; 0 when none do."""
        if self.plan is None or self.plan.candidate.allocation.ctx_per_slot < self.wanted_per_slot:
            return 0
        return self.plan.settings.n_seq


def fit_quants(
    listing: RepoListing,
    report: GpuReport,
    request: PlanRequest,
    *,
    cache: HeaderCache | None = None,
    workers: int = HEADER_WORKERS,
) -> list[QuantFit]:
    """Plan every quant of ``listing`` on the card in ``report``; smallest file first.

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
        _judge(choice, result, report, request)
        for choice, result in zip(choices, resolved, strict=True)
    ]


def _judge(
    choice: QuantChoice,
    resolved: ResolvedModel | HomelabError,
    report: GpuReport,
    request: PlanRequest,
) -> QuantFit:
    from homelab.hub.errors import HubAuthError, HubNetworkError
    from homelab.plan.calibration import apply_calibration
    from homelab.plan.planner import make_plan

    if isinstance(resolved, (HubAuthError, HubNetworkError)):
        raise resolved
    if isinstance(resolved, HomelabError):
        return QuantFit(choice, "unknown", reason=resolved.message)
    origins = sorted({p.origin for p in resolved.parts})
    common = {"header_origin": "+".join(origins), "bytes_fetched": resolved.bytes_fetched}
    try:
        plan = make_plan(resolved.model, resolved.display, report, request)
        plan = apply_calibration(plan, resolved.model, report)
    except DoesNotFitError as error:
        return QuantFit(choice, "does_not_fit", reason=error.message, **common)
    except HomelabError as error:
        return QuantFit(choice, "unknown", reason=error.message, **common)
    return QuantFit(choice, plan.verdict, plan, _wanted_per_slot(plan), **common)


def _wanted_per_slot(plan: Plan) -> int:
    """The workload's tokens per conversation, padded and capped like the planner does."""
    from homelab.plan.kv import CTX_PAD, pad

    wanted = pad(plan.request.workload.tokens_per_slot)
    cap = plan.geometry.trained_ctx // CTX_PAD * CTX_PAD
    return min(wanted, cap) if cap else wanted


def pick_best(fits: list[QuantFit]) -> QuantFit | None:
    """The largest quant that fits on the card with at least one full workload slot."""
    good = [f for f in fits if f.verdict == "fits" and f.full_slots >= 1]
    return max(good, key=lambda f: (f.size or 0, f.label)) if good else None


def explain(fits: list[QuantFit], best: QuantFit | None, workload_name: str) -> str:
    """One sentence: why ``best`` (and not the next larger quant), or why there is none."""
    if best is None:
        fitting = [f for f in fits if f.plan is not None and f.verdict == "fits"]
        if fitting:
            most = max(fitting, key=lambda f: f.ctx_per_slot or 0)
            return (
                f"No quant fits with a whole conversation of the {workload_name} workload "
                f"({most.wanted_per_slot:,} tokens); the most is {most.label}'s "
                f"{most.ctx_per_slot:,} tokens per slot."
            )
        return f"No quant fits on this card for the {workload_name} workload."
    why = (
        f"{best.label} is the largest quant that fits with whole conversations of the "
        f"{workload_name} workload ({best.full_slots} slot(s) × {best.ctx_per_slot:,} tokens)"
    )
    bigger = sorted(
        (f for f in fits if (f.size or 0) > (best.size or 0)), key=lambda f: f.size or 0
    )
    if not bigger:
        return why + "; it is the largest quant in the repo."
    return f"{why}; the next larger, {bigger[0].label}, {_shortfall(bigger[0])}."


def _shortfall(fit: QuantFit) -> str:
    if fit.verdict == "fits":
        return f"fits only {fit.ctx_per_slot:,} of the {fit.wanted_per_slot:,} tokens a conversation needs"
    if fit.verdict == "partial":
        return "does not fit on the card (layers would run on the CPU)"
    if fit.verdict == "does_not_fit":
        return "does not fit"
    return f"could not be judged ({fit.reason})"


def run(args: argparse.Namespace) -> int:
    from homelab.hub.model_ref import list_repo, parse_model_ref
    from homelab.plan.budget import device_budget

    request = request_from_args(args)
    ref = parse_model_ref(args.repo)
    if ref.is_local or ref.quant or ref.filename:
        raise UsageError(
            f"`homelab quants` takes a Hugging Face repo (owner/name), not {args.repo!r}",
            hint="`homelab plan` plans one file or REPO:QUANT.",
        )
    listing = list_repo(ref.repo or "", ref.revision)
    report = report_from_args(args)
    device = device_budget(report, request.device_index).name
    fits = fit_quants(listing, report, request)
    best = pick_best(fits)
    why = explain(fits, best, request.workload.name)
    if args.json:
        print_json(_to_dict(listing, fits, best, why, request, device))
    else:
        _print_table(listing, fits, best, why, request, device)
    return int(ExitCode.OK if best is not None else ExitCode.DOES_NOT_FIT)


_VERDICT_WORDS = {
    "fits": "fits",
    "partial": "partial",
    "does_not_fit": "does not fit",
    "unknown": "unknown",
}


def _print_table(
    listing: RepoListing,
    fits: list[QuantFit],
    best: QuantFit | None,
    why: str,
    request: PlanRequest,
    device: str,
) -> None:
    print(
        f"{listing.repo} at {listing.revision} ({listing.commit[:12]}), {len(fits)} quant(s), on "
        f"{device}, workload {request.workload.describe()}"
    )
    if listing.offline_reason:
        print(f"! {listing.offline_reason}: only what is cached on this machine is listed")
    rows = [("", "QUANT", "SIZE", "FIT", "FULL SLOTS", "TOKENS/SLOT", "TOKENS FIT")]
    for fit in fits:
        plan = fit.plan
        rows.append(
            (
                "*" if fit is best else "",
                fit.label
                + (f" ({len(fit.choice.files)} parts)" if len(fit.choice.files) > 1 else ""),
                format_bytes(fit.size),
                _VERDICT_WORDS[fit.verdict],
                str(fit.full_slots) if plan else "-",
                f"{plan.candidate.allocation.ctx_per_slot:,}" if plan else "-",
                f"{plan.tokens_fit:,}" if plan else "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                cell.ljust(width) if i < 4 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    for fit in fits:
        if fit.reason and fit.verdict in ("unknown", "does_not_fit"):
            print(f"  {fit.label}: {fit.reason}")
    print(("Best: " if best else "") + why)
    fetched = [f for f in fits if "remote" in (f.header_origin or "")]
    if fetched:
        total = sum(f.bytes_fetched for f in fetched)
        print(
            f"Headers: {len(fetched)} quant(s) read remotely ({format_bytes(total)} fetched, cached "
            "for next time); nothing was downloaded."
        )


def _to_dict(
    listing: RepoListing,
    fits: list[QuantFit],
    best: QuantFit | None,
    why: str,
    request: PlanRequest,
    device: str,
) -> dict:
    return {
        "repo": listing.repo,
        "revision": listing.revision,
        "commit": listing.commit,
        "offline_reason": listing.offline_reason,
        "device": device,
        "workload": {
            "name": request.workload.name,
            "tokens_per_slot": request.workload.tokens_per_slot,
        },
        "quants": [_fit_dict(f, f is best) for f in fits],
        "best": best.label if best else None,
        "why": why,
        "bytes_fetched": sum(f.bytes_fetched for f in fits),
    }


def _fit_dict(fit: QuantFit, is_best: bool) -> dict:
    plan = fit.plan
    alloc = plan.candidate.allocation if plan else None
    return {
        "quant": fit.label,
        "files": [f.path for f in fit.choice.files],
        "size_bytes": fit.size,
        "verdict": fit.verdict,
        "best": is_best,
        "slots": plan.settings.n_seq if plan else None,
        "full_slots": fit.full_slots if plan else None,
        "ctx_per_slot": alloc.ctx_per_slot if alloc else None,
        "wanted_per_slot": fit.wanted_per_slot or None,
        "tokens_fit": plan.tokens_fit if plan else None,
        "weights_bytes": plan.weights.total if plan else None,
        "kv_bytes_per_token": alloc.bytes_per_token if alloc else None,
        "n_gpu_layers": plan.n_gpu_layers if plan else None,
        "header_source": fit.header_origin,
        "reason": fit.reason,
    }
