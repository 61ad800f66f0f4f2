"""``homelab quants REPO``: which quant to pick, every GGUF model of a repo planned on this card.

Parses the shared plan options, asks :mod:`homelab.serve.quant_fit` to judge every quant
(headers only, nothing downloaded) and :mod:`homelab.serve.quant_rank` to rank them (served
workload first, then bit width, then the speed cost of experts in RAM), and renders the
table or ``--json``. A MoE repo's table adds each quant's rung of the offload ladder and its
RAM side; a dense repo's table is as it always was.

Exit codes: 0 when a best choice exists, 3 when no quant fits with a full slot.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from homelab.cli.common import print_json
from homelab.cli.plan_cmd import add_plan_arguments, options_from_args
from homelab.errors import ExitCode, UsageError
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.hub.model_ref import RepoListing
    from homelab.plan.planner import Plan
    from homelab.plan.workload import Workload
    from homelab.serve.quant_fit import QuantFit


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


def run(args: argparse.Namespace) -> int:
    from homelab.hub.model_ref import parse_model_ref
    from homelab.serve.quant_choice import quants_on_card

    options = options_from_args(args)
    ref = parse_model_ref(args.repo)
    if ref.is_local or ref.quant or ref.filename:
        raise UsageError(
            f"`homelab quants` takes a Hugging Face repo (owner/name), not {args.repo!r}",
            hint="`homelab plan` plans one file or REPO:QUANT.",
        )
    judged = quants_on_card(ref.repo or "", ref.revision, options)
    listing, fits, order, why = judged.listing, judged.fits, judged.order, judged.why
    if args.json:
        print_json(_to_dict(listing, fits, order, why, judged.workload, judged.device))
    else:
        _print_table(listing, fits, order, why, judged.workload, judged.device)
    return int(ExitCode.OK if judged.best is not None else ExitCode.DOES_NOT_FIT)


def _print_table(
    listing: RepoListing,
    fits: list[QuantFit],
    order: list[QuantFit],
    why: str,
    workload: Workload,
    device: str,
) -> None:
    from homelab.serve.quant_choice import verdict_words

    best = order[0] if order else None
    print(
        f"{listing.repo} at {listing.revision} ({listing.commit[:12]}), {len(fits)} quant(s), on "
        f"{device}, workload {workload.describe()}"
    )
    if listing.offline_reason:
        print(f"! {listing.offline_reason}: only what is cached on this machine is listed")
    moe = any(f.fit.plan and any(f.fit.plan.weights.experts_per_block) for f in fits)
    rows: list[tuple[str, ...]] = [
        ("", "QUANT", "SIZE", "FIT", "FULL SLOTS", "TOKENS/SLOT", "TOKENS FIT")
    ]
    if moe:
        rows[0] += ("PLACEMENT", "RAM")
    for quant in fits:
        fit, plan = quant.fit, quant.fit.plan
        row: tuple[str, ...] = (
            "*" if quant is best else "",
            quant.label
            + (f" ({len(quant.choice.files)} parts)" if len(quant.choice.files) > 1 else ""),
            format_bytes(quant.size),
            verdict_words(quant),
            str(fit.full_slots) if plan else "-",
            f"{plan.candidate.allocation.ctx_per_slot:,}" if plan else "-",
            f"{plan.tokens_fit:,}" if plan else "-",
        )
        if moe:
            row += _rung_cells(plan)
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(
                cell.ljust(width) if i < 4 or i == 7 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
    for quant in fits:
        if quant.fit.reason and quant.fit.verdict in ("unknown", "does_not_fit"):
            print(f"  {quant.label}: {quant.fit.explanation if moe else quant.fit.reason}")
        elif moe and quant.fit.plan and quant not in order and quant.fit.plan.warnings:
            print(f"  {quant.label}: {quant.fit.plan.warnings[0]}")  # why it is not ranked
    print(("Best: " if best else "") + why)
    fetched = [f for f in fits if "remote" in (f.header_origin or "")]
    if fetched:
        total = sum(f.bytes_fetched for f in fetched)
        print(
            f"Headers: {len(fetched)} quant(s) read remotely ({format_bytes(total)} fetched, cached "
            "for next time); nothing was downloaded."
        )


def _rung_cells(plan: Plan | None) -> tuple[str, str]:
    """The PLACEMENT and RAM cells: the plan's rung, and what it keeps in system RAM."""
    from homelab.serve.quant_rank import rung_of

    if plan is None:
        return ("-", "-")
    rung = rung_of(plan)
    if rung.kind in ("experts", "layers") and rung.ram is not None:
        return (rung.words, format_bytes(rung.ram.mapped))
    return (rung.words, "-")


def _to_dict(
    listing: RepoListing,
    fits: list[QuantFit],
    order: list[QuantFit],
    why: str,
    workload: Workload,
    device: str,
) -> dict:
    return {
        "repo": listing.repo,
        "revision": listing.revision,
        "commit": listing.commit,
        "offline_reason": listing.offline_reason,
        "device": device,
        "workload": {
            "name": workload.name,
            "tokens_per_slot": workload.tokens_per_slot,
        },
        "quants": [_fit_dict(f, order) for f in fits],
        "best": order[0].label if order else None,
        "ranking": [f.label for f in order],
        "why": why,
        "bytes_fetched": sum(f.bytes_fetched for f in fits),
    }


def _fit_dict(row: QuantFit, order: list[QuantFit]) -> dict:
    from homelab.serve.quant_rank import rung_of

    fit = row.fit
    plan = fit.plan
    alloc = plan.candidate.allocation if plan else None
    rung = rung_of(plan) if plan else None
    ram = rung.ram if rung else None
    return {
        "quant": row.label,
        "files": [f.path for f in row.choice.files],
        "size_bytes": row.size,
        "bits": row.bits,
        "verdict": fit.verdict,
        "best": bool(order) and row is order[0],
        "rank": order.index(row) + 1 if row in order else None,
        "rung": rung.kind if rung else None,
        "placement": rung.words if rung else None,
        "n_cpu_moe": rung.n_cpu_moe if rung else None,
        "rung_reason": (plan.rung or None) if plan else None,
        "ram": {"experts": ram.experts, "weights": ram.tensors, "mapped": ram.mapped}
        if ram
        else None,
        "warnings": list(plan.warnings) if plan else [],
        "slots": plan.settings.n_seq if plan else None,
        "full_slots": fit.full_slots if plan else None,
        "ctx_per_slot": alloc.ctx_per_slot if alloc else None,
        "wanted_per_slot": fit.wanted_per_slot,
        "tokens_fit": plan.tokens_fit if plan else None,
        "weights_bytes": plan.weights.total if plan else None,
        "kv_bytes_per_token": alloc.bytes_per_token if alloc else None,
        "n_gpu_layers": plan.n_gpu_layers if plan else None,
        "header_source": row.header_origin,
        "reason": fit.reason,
    }
