"""``homelab plan --models [FILE]`` and ``homelab plan A B C``: a set of models placed on the
card together, each priced as ``homelab plan`` prices it; which stay resident, which swap."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from homelab.cli.common import print_json
from homelab.errors import ExitCode, UsageError
from homelab.units import format_bytes

_VERDICT = {
    "fits": "fits alone",
    "partial": "does not fit alone (layers in RAM)",
    "does_not_fit": "does not fit even alone",
}


def wants_set(args: argparse.Namespace) -> bool:
    """The command line names a set: ``--models``, or more than one model."""
    return args.models is not None or bool(args.more_models)


def run(args: argparse.Namespace) -> int:
    from homelab.cli.plan_cmd import options_from_args
    from homelab.serve.model_set import plan_set

    entries, where = _entries(args)
    if args.ctx is not None or args.parallel is not None:
        raise UsageError(
            "--ctx and --parallel are one model's; a set gives each model its workload's",
            hint="Set a model's slots in the models list (slots = 2).",
        )
    planned = plan_set(entries, options_from_args(args), where=where)
    if args.json:
        print_json(set_data(planned))
    else:
        for line in set_lines(planned):
            print(line)
    return int(ExitCode.OK if planned.first_fits else ExitCode.DOES_NOT_FIT)


def _entries(args: argparse.Namespace) -> tuple[tuple[Any, ...], str]:
    """The entries the command line names, and how errors name their list.

    Raises:
        UsageError: both a models list and models, or neither.
    """
    from homelab.plan.models_file import ModelEntry, default_models_file, load_models_file
    from homelab.plan.workload import parse_workload

    given = [m for m in (args.model, *args.more_models) if m is not None]
    if args.models is not None:
        if given:
            raise UsageError("give a models list (--models) or models, not both")
        path = Path(args.models) if args.models else default_models_file()
        if args.workload is not None or args.for_agent is not None:
            raise UsageError(
                "a models list gives each model its workload; --workload and --for are not "
                "taken with --models"
            )
        return load_models_file(path), str(path)
    if args.for_agent is not None:
        raise UsageError("--for is one model's; give several models a --workload")
    workload = parse_workload(args.workload) if args.workload else None
    return tuple(ModelEntry(m, workload) for m in given), "the models given"


def set_lines(planned) -> list[str]:
    """The set's working for a person: each device's budget (its fixed costs once), each
    model's bytes and verdict, the residents' sum against the usable memory, the swaps."""
    placement = planned.placement
    lines = []
    several_cards = sum(1 for name in placement.devices if name.startswith("CUDA")) > 1
    for name, b in placement.devices.items():
        lines.append(
            f"{b.name} ({name}): {format_bytes(b.total)} − reserved {format_bytes(b.reserved)}"
            f" − desktop {format_bytes(b.desktop)} − other {format_bytes(b.other)}"
            f" − headroom {format_bytes(b.headroom)} = {format_bytes(b.usable)} usable, "
            "counted once for the set"
        )
    for n, (model, member) in enumerate(zip(planned.models, placement.members, strict=True), 1):
        shape = f"{model.workload.name}, {model.slots} × {_per_slot(model)} tokens"
        cards = member.model.cards
        on = f", on {' + '.join(cards)}" if several_cards and cards else ""
        lines.append(f"{n}. {member.model.id} ({shape}): {_VERDICT[member.model.verdict]}{on}")
        for c in member.model.costs:
            lines.append(
                f"   weights {format_bytes(c.weights)} + KV {format_bytes(c.kv)} + compute "
                f"{format_bytes(c.compute)} + CUDA context {format_bytes(c.context)} = "
                f"{format_bytes(c.total)} on {c.device}"
            )
        if member.model.plan is None:
            lines.append(f"   {member.model.problem}")
        else:
            lines.extend(f"   ! {w}" for w in member.model.plan.warnings)
        if model.offline:
            lines.append(f"   ! planned from the preset's own facts: {model.offline}")
    for name, b in placement.devices.items():
        used = placement.used(name)
        lines.append(
            f"Resident on {name}: {' + '.join(_resident_ids(placement, name)) or 'none'} = "
            f"{format_bytes(used)} of {format_bytes(b.usable)} usable "
            f"({format_bytes(b.usable - used)} left)"
        )
    for member in placement.members:
        if member.moved:
            lines.append(f"On another card: {member.model.id}: {member.why}")
        if member.status != "resident":
            word = "Swaps" if member.status == "swaps" else "Does not fit"
            lines.append(f"{word}: {member.model.id}: {member.why}")
    return lines


def _per_slot(model) -> str:
    plan = model.priced.plan
    if plan is None:
        return f"{model.workload.tokens_per_slot:,}"
    return f"{plan.candidate.allocation.ctx_per_slot:,}"


def _resident_ids(placement, device: str) -> list[str]:
    return [
        m.model.id
        for m in placement.members
        if m.status == "resident" and any(c.device == device for c in m.model.costs)
    ]


def set_data(planned) -> dict[str, Any]:
    """The set as ``--json`` prints it: sizes in bytes, an unknown one null."""
    placement = planned.placement
    devices = [
        {
            "device": name,
            "name": b.name,
            "kind": b.kind,
            "total": b.total,
            "reserved": b.reserved,
            "desktop": b.desktop,
            "other": b.other,
            "headroom": b.headroom,
            "usable": b.usable,
            "resident": placement.used(name),
            "left": b.usable - placement.used(name),
        }
        for name, b in placement.devices.items()
    ]
    models = []
    for model, member in zip(planned.models, placement.members, strict=True):
        plan = member.model.plan
        alloc = None if plan is None else plan.candidate.allocation
        models.append(
            {
                "id": member.model.id,
                "model": model.entry.model,
                "aliases": list(model.entry.aliases),
                "workload": model.workload.name,
                "slots": model.slots,
                "ctx_per_slot": None if alloc is None else alloc.ctx_per_slot,
                "verdict": member.model.verdict,
                "cards": list(member.model.cards),
                "moved": member.moved,
                "status": member.status,
                "evicts": list(member.evicts),
                "why": member.why,
                "problem": member.model.problem,
                "bytes": sum(c.total for c in member.model.costs) if plan is not None else None,
                "devices": [
                    {
                        "device": c.device,
                        "weights": c.weights,
                        "kv": c.kv,
                        "compute": c.compute,
                        "cuda_context": c.context,
                        "total": c.total,
                    }
                    for c in member.model.costs
                ],
                "warnings": [] if plan is None else list(plan.warnings),
                "offline": model.offline,
                "argv": list(model.argv),
            }
        )
    return {
        "devices": devices,
        "models": models,
        "resident": list(placement.ids("resident")),
        "swaps": list(placement.ids("swaps")),
        "does_not_fit": list(placement.ids("does_not_fit")),
    }
