"""``homelab presets``: the shipped and user presets, each with its fit on this card.

Every preset's default quant is planned as ``homelab plan REPO:QUANT`` would plan it
(header read remotely or from the caches, nothing downloaded), for the preset's own
workload hint unless ``--workload`` says otherwise. Human output is a table; ``--json``
is one object with sizes in bytes. Exit 0 when the list was made (whatever the
verdicts), 2 for a broken preset file, 5 when the GPU probe failed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.cli.common import print_json
from homelab.cli.plan_cmd import add_plan_arguments, options_from_args
from homelab.errors import ExitCode
from homelab.plan.vocabulary import (
    ALLOCATED,
    FIT,
    TRAINED_CAP,
    USABLE,
    VERDICT_WORDS,
    capped_at_trained,
)
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.budget import DeviceBudget
    from homelab.plan.planner import Plan
    from homelab.serve.preset_fit import PresetFit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``homelab presets`` to the command tree."""
    parser = subparsers.add_parser(
        "presets",
        help="list the model presets and how each fits this card",
        description="List the shipped and user presets (config dir: presets/*.toml) with the "
        "fit of each default quant on this card: the slots × tokens allocated for the preset's "
        "workload, and the tokens that fit. Reads GGUF headers remotely (or from the caches), never the weights.",
    )
    add_plan_arguments(parser)
    for action in parser._actions:
        if action.dest == "workload":
            action.help = (
                "agent, chat or a token count for every preset (default: each preset's own hint)"
            )
    parser.add_argument("--json", action="store_true", help="one JSON object, sizes in bytes")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from homelab.hub.presets import load_presets, shipped_presets_dir, user_presets_dir
    from homelab.plan.budget import device_budget
    from homelab.plan.card import card_for
    from homelab.serve.preset_fit import fit_presets

    presets = load_presets()
    options = options_from_args(args)  # no --workload: each preset's own hint
    report = card_for(options)
    budget = device_budget(report, options.card.gpu)
    fits = fit_presets(presets, report, options)
    shipped = shipped_presets_dir()
    if args.json:
        print_json(
            {
                "shipped_dir": str(shipped) if shipped else None,
                "user_dir": str(user_presets_dir()),
                "card": _card(budget),
                "presets": [fit_to_dict(fit) for fit in fits],
            }
        )
    else:
        print_table(fits, budget, user_presets_dir())
    return int(ExitCode.OK)


def fit_to_dict(row: PresetFit) -> dict[str, Any]:
    """One preset and its verdict, sizes in bytes (the ``--json`` contract)."""
    preset, fit = row.preset, row.fit
    plan = fit.plan
    return {
        "key": preset.key,
        "name": preset.name,
        "repo": preset.repo,
        "quant": preset.quant,
        "ref": preset.ref,
        "alt_quants": list(preset.alt_quants),
        "engine": preset.engine,
        "arch": preset.arch,
        "mmproj": preset.mmproj,
        "license": preset.license,
        "notes": preset.notes,
        "origin": preset.origin,
        "source": str(preset.source),
        "overrides": str(preset.overrides) if preset.overrides else None,
        "workload": {"name": fit.workload.name, "tokens_per_slot": fit.workload.tokens_per_slot},
        "verdict": fit.verdict,
        "verdict_from": row.source,
        "reason": fit.explanation,
        "problem": fit.problem,
        "file_bytes": fit.file_bytes,
        "weights_bytes": fit.weights_bytes,
        "kv_bytes_per_token": fit.kv_bytes_per_token,
        "tokens_fit": fit.tokens_fit,
        "parallel": fit.slots,
        "ctx_per_slot": fit.ctx_per_slot,
        "ctx_size": plan.candidate.allocation.n_ctx if plan else None,
        "n_gpu_layers": plan.n_gpu_layers if plan else None,
        "n_cpu_moe": plan.weights.n_cpu_moe if plan else None,
        "warnings": list(row.warnings) + (list(plan.warnings) if plan else []),
    }


def _card(budget: DeviceBudget) -> dict[str, Any]:
    return {
        "device": budget.name,
        "kind": budget.kind,
        "total": budget.total,
        "usable": budget.usable,
    }


def print_table(fits: list[PresetFit], budget: DeviceBudget, user_dir: Path) -> None:
    """The presets as an aligned table, with the reasons for unknown verdicts below."""
    print(
        f"On {budget.name}: {format_bytes(budget.total)} in all, "
        f"{format_bytes(budget.usable)} {USABLE}."
    )
    header = (
        "PRESET",
        "QUANT",
        "WORKLOAD",
        "FIT",
        "OFF THE CARD",
        f"SLOTS × TOKENS {ALLOCATED.upper()}",
        f"TOKENS THAT {FIT.upper()}",
        "WEIGHTS",
        "KV/TOKEN",
    )
    rows = [header] + [_row(fit) for fit in fits]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    offline = [
        entry.preset.key
        for entry in fits
        if entry.fit.verdict == "unknown" and entry.fit.problem == "Offline"
    ]
    if len(offline) > 1:
        print(
            f"! Offline, and these headers were never read: {', '.join(offline)}. Run "
            "`homelab presets` once online: it reads only the headers and keeps them for next time."
        )
    facts = [entry.preset.key for entry in fits if entry.source == "preset"]
    if facts:
        print(
            f"! From the preset's own facts (no header read yet): {', '.join(facts)}. "
            "A header read online replaces them."
        )
    for entry in fits:
        if entry.fit.reason and not (len(offline) > 1 and entry.preset.key in offline):
            print(f"! {entry.preset.key}: {entry.fit.explanation}")
        elif entry.ladder_skipped:
            print(f"! {entry.preset.key}: {entry.ladder_skipped}")
    print(f"Your own presets: {user_dir}/NAME.toml (same name overrides a shipped preset).")


def _row(row: PresetFit) -> tuple[str, ...]:
    fit = row.fit
    marker = "*" if row.preset.origin == "user" else ""
    conversations = tokens = "-"
    if fit.plan is not None:
        conversations = f"{fit.slots} × {fit.ctx_per_slot:,}"
        if capped_at_trained(fit.plan):
            conversations += f" ({TRAINED_CAP})"
        tokens = f"{fit.tokens_fit:,}"
    off_card = _off_card(fit.plan) if fit.plan is not None else "-"
    weights = fit.weights_bytes
    per_token = format_bytes(fit.kv_bytes_per_token) if fit.kv_bytes_per_token is not None else "-"
    return (
        row.preset.key + marker,
        row.preset.quant,
        fit.workload.name,
        VERDICT_WORDS[fit.verdict],
        off_card,
        conversations,
        tokens,
        format_bytes(weights) if weights is not None else "-",
        per_token,
    )


def _off_card(plan: Plan) -> str:
    """What the plan keeps off the card: the experts of N layers in RAM, or whole layers."""
    from homelab.plan.placement import plan_ram

    ram = plan_ram(plan)
    if ram is not None:
        return f"experts of {ram.n_cpu_moe} layers ({format_bytes(ram.experts)})"
    if plan.n_gpu_layers is not None:
        n_blocks = len(plan.weights.per_block)
        return f"{n_blocks - sum(d.n_blocks for d in plan.devices)} of {n_blocks} layers"
    return "-"
