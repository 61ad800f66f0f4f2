"""A set of models planned together: each priced alone as ``homelab plan`` prices it, then
placed on the card by :func:`~homelab.plan.model_set.place_set`.

This is the application-layer half of the placement: it knows what a model's name means (a
local file, a preset, a Hub ``REPO:QUANT`` read from its header, nothing downloaded), probes
the card once for the whole set, and gives each model the options of its own entry (its
workload, its slots) over the ones the person asked for the set (the card, the cache type).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from homelab.errors import DoesNotFitError, HomelabError, UsageError
from homelab.gpu.report import GpuReport
from homelab.plan.budget import DeviceBudget
from homelab.plan.model_set import PricedModel, SetPlacement, place_set
from homelab.plan.models_file import ModelEntry, check_names, set_slots
from homelab.plan.options import PlanOptions
from homelab.plan.planner import Plan
from homelab.plan.workload import AGENT, Workload
from homelab.serve.model_ref import Named

_ID_FLAGS = ("--alias", "--served-model-name")


@dataclass(frozen=True, slots=True)
class SetModel:
    """One entry of the set, resolved and priced."""

    entry: ModelEntry
    priced: PricedModel
    workload: Workload
    slots: int
    argv: tuple[str, ...] = ()
    """Its engine's command line, as ``homelab plan`` shows it; empty when no plan was made."""
    offline: str | None = None
    """A preset planned from its own facts: why the Hub could not be had."""
    elsewhere_argv: tuple[tuple[str, ...], ...] = ()
    """The command line of each of ``priced.elsewhere`` (the model on another card)."""


@dataclass(frozen=True, slots=True)
class PlannedSet:
    """The set, each model priced, and where each one stands."""

    models: tuple[SetModel, ...]
    placement: SetPlacement

    @property
    def first_fits(self) -> bool:
        """The most wanted model (the first listed) is resident: the set is worth serving."""
        return bool(self.placement.members) and self.placement.members[0].status == "resident"


def plan_set(
    entries: Sequence[ModelEntry],
    options: PlanOptions,
    *,
    report: GpuReport | None = None,
    where: str = "the models given",
) -> PlannedSet:
    """``entries`` (in priority order) priced on ``report`` (None: the card ``options`` name,
    probed once) and placed together; ``where`` names the list in errors.

    Raises:
        UsageError: an engine other than llama.cpp, RPC workers, or two models that answer
            to one name once their ids are known.
        HomelabError: a model that cannot be read (named in the message).
    """
    from homelab.engine.kinds import engine_kind
    from homelab.plan.card import card_for

    if not engine_kind(options.engine.name).loads_gguf:  # priced from GGUF headers
        raise UsageError(
            f"a set of models is placed for llama.cpp, not {options.engine.name}",
            hint="Plan a vLLM model on its own.",
        )
    if options.card.rpc:
        raise UsageError("a set of models is placed on this machine's devices, not RPC workers")
    if not entries:
        raise UsageError("no model to place")
    card = card_for(options) if report is None else report
    models = tuple(_priced(entry, card, options) for entry in entries)
    check_names([(m.priced.id, m.entry.aliases) for m in models], where)
    devices = _devices(models, card, options)
    placement = place_set([m.priced for m in models], devices)
    placed = zip(models, placement.members, strict=True)
    chosen = tuple(_on_its_card(m, member.model) for m, member in placed)
    return PlannedSet(chosen, placement)


def _on_its_card(model: SetModel, placed: PricedModel) -> SetModel:
    """``model`` as the placement put it: on another card, with that card's plan and argv."""
    for other, argv in zip(model.priced.elsewhere, model.elsewhere_argv, strict=True):
        if other is placed:
            return replace(model, priced=placed, argv=argv, elsewhere_argv=())
    return model


def _priced(entry: ModelEntry, card: GpuReport, options: PlanOptions) -> SetModel:
    """``entry`` planned alone on ``card`` for its workload and slots; a model that does not
    fit at all is kept with the planner's reason, not raised: the set still places the rest."""
    from homelab.engine.kinds import engine_kind
    from homelab.serve.model_ref import named_model

    kind = engine_kind(options.engine.name)
    try:
        named = named_model(entry.model, kind)
    except HomelabError as error:
        raise _named(error, entry) from None
    workload = entry.workload or named.workload or AGENT
    slots = entry.slots or set_slots(workload)
    asked = replace(
        options, workload=replace(options.workload, per_slot=workload, slots=slots, ctx=None)
    )
    preset_key = None if named.preset is None else named.preset.key
    try:
        plan, argv, offline = _plan_one(entry, named, card, asked)
    except DoesNotFitError as error:
        from homelab.engine.llamacpp.served_id import served_id

        ident = entry.id or served_id(None, named.target, preset_key)
        return SetModel(entry, PricedModel(ident, None, error.message), workload, slots)
    except HomelabError as error:
        raise _named(error, entry) from None
    ident = entry.id or _served_id(argv) or entry.model
    priced = PricedModel(ident, plan)
    others = _elsewhere(entry, named, card, asked, priced)
    priced = replace(priced, elsewhere=tuple(o for o, _ in others))
    return SetModel(
        entry, priced, workload, slots, argv, offline, tuple(argv for _, argv in others)
    )


def _elsewhere(
    entry: ModelEntry, named: Named, card: GpuReport, options: PlanOptions, priced: PricedModel
) -> list[tuple[PricedModel, tuple[str, ...]]]:
    """``priced`` planned alone on each other card of ``card``, where it fits there: when no
    card was asked (``--gpu``) and its own plan holds it whole on one card."""
    if options.card.gpu is not None or priced.verdict != "fits" or len(priced.cards) != 1:
        return []
    out = []
    for device in card.devices:
        if f"CUDA{device.index}" in priced.cards:
            continue
        pinned = replace(options, card=replace(options.card, gpu=device.index))
        try:
            plan, argv, _ = _plan_one(entry, named, card, pinned)
        except HomelabError:
            continue
        other = PricedModel(priced.id, plan)
        if other.verdict == "fits":
            out.append((other, argv))
    return out


def _plan_one(
    entry: ModelEntry, named: Named, card: GpuReport, options: PlanOptions
) -> tuple[Plan, tuple[str, ...], str | None]:
    """(plan, argv, offline) for one model: a preset as ``homelab plan PRESET`` plans it (from
    its facts while the Hub cannot be reached), anything else as ``homelab plan MODEL``."""
    from homelab.serve.prepare import prepare

    if named.preset is not None:
        from homelab.serve.preset_plan import plan_preset

        planned = plan_preset(named.preset, card, options)
        return planned.plan, planned.argv, planned.offline
    target = named.target if named.local else entry.model
    prepared = prepare(target, card, options, served_name=entry.id)
    plan = prepared.plan.plan
    if not isinstance(plan, Plan):  # llama.cpp's plan: a set is placed for llama.cpp only
        raise UsageError(f"{entry.model}: not a llama.cpp plan")
    return plan, prepared.argv, None


def _served_id(argv: Sequence[str]) -> str | None:
    """The id the engine's command line serves the model by (``--alias``)."""
    for flag in _ID_FLAGS:
        if flag in argv[:-1]:
            return argv[list(argv).index(flag) + 1]
    return None


def _named(error: HomelabError, entry: ModelEntry) -> HomelabError:
    """``error`` with the entry it is about named first (same class, same exit code)."""
    error.message = f"{entry.model}: {error.message}"
    error.args = (error.message,)
    return error


def _devices(
    models: Sequence[SetModel], card: GpuReport, options: PlanOptions
) -> dict[str, DeviceBudget]:
    """Every device a plan uses, each with its one budget (the same report priced them all);
    the card the planner would pick when no model could be planned at all."""
    devices: dict[str, DeviceBudget] = {}
    for model in models:
        for priced in (model.priced, *model.priced.elsewhere):
            for share in () if priced.plan is None else priced.plan.devices:
                devices.setdefault(share.device.llama_name, share.device.budget)
    if not devices:  # the device one model's plan would take: the card asked, else the freest
        from homelab.plan.budget import device_budget, pick_device

        gpus = options.card.gpus
        chosen = pick_device(card, gpus[0] if gpus else None)
        name = "CPU" if chosen is None else f"CUDA{chosen.index}"
        devices[name] = device_budget(card, None if chosen is None else chosen.index)
    return devices
