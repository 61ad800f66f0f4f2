"""Which models of a set stay loaded together on the card, and which must swap.

Each model is priced alone by the planner, exactly as ``homelab plan`` prices it, against the
whole card: its plan's budget already takes the card's reserved memory, the desktop, other
processes and the headroom off once. What one model's engine holds on a device is then its
weights there, its KV cache and its engine state (CUDA context and compute buffer): none of
the card's fixed costs. So the set is placed by adding those per device and comparing the sum
with the device's usable memory, the fixed costs counted once for the whole set.

The resident set is built in the list's order (the first listed is the most wanted): each
model that fits alone joins when it fits beside those already in, so a model is never left
out for one listed after it. On a machine of several cards, a model that does not fit
beside the residents on the card its own plan chose (the freest) is tried on each other
card, planned alone there (:attr:`PricedModel.elsewhere`), and joins on the first where it
fits beside the residents there. The rest swap: each with the residents it would evict to load,
least recently used first. Offline there is no use yet, so the least recently used is the
least wanted: the list's order reversed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from homelab.plan.budget import DeviceBudget
from homelab.plan.planner import Plan

Status = Literal["resident", "swaps", "does_not_fit"]

RAM = "RAM"
"""The device name of system RAM as a card's plan uses it: routed experts kept there
(``--n-cpu-moe``), summed over the residents against the RAM free (not ``CPU``: a plan
without a card, all in system RAM, names its one device that)."""


@dataclass(frozen=True, slots=True)
class DeviceCost:
    """What one model's engine holds on one device, in bytes."""

    device: str
    """llama-server's name for it (``CUDA0``, ``CPU``)."""
    weights: int
    kv: int
    compute: int
    """The compute buffer (flash attention's scratch included)."""
    context: int
    """The CUDA context its process creates on a card (0 in system RAM)."""

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute + self.context


@dataclass(frozen=True, slots=True)
class PricedModel:
    """One model of the set, priced alone; ``plan`` None when no plan could be made."""

    id: str
    plan: Plan | None
    problem: str | None = None
    """Why there is no plan (the planner's own words), when there is none."""
    elsewhere: tuple[PricedModel, ...] = ()
    """The same model planned alone on each other card of a several-card machine (its plan
    on one card only): where the placement tries it when it does not fit beside the
    residents on the card its own plan chose."""

    @property
    def cards(self) -> tuple[str, ...]:
        """The cards its plan puts it on (llama-server's names, ``CUDA1``); none in RAM."""
        if self.plan is None:
            return ()
        return tuple(s.device.llama_name for s in self.plan.devices if s.device.cuda)

    @property
    def verdict(self) -> str:
        """``fits`` (alone, all on the card), ``partial`` (layers in RAM) or ``does_not_fit``."""
        return "does_not_fit" if self.plan is None else self.plan.verdict

    @property
    def costs(self) -> tuple[DeviceCost, ...]:
        """Its bytes per device, from the plan's own shares; with routed experts kept in
        system RAM, their side there too (:data:`RAM`), when the RAM free was known."""
        if self.plan is None:
            return ()
        cards = tuple(
            DeviceCost(
                share.device.llama_name,
                share.weights,
                share.kv,
                share.engine.compute_buffer,
                share.engine.cuda_context,
            )
            for share in self.plan.devices
        )
        ram = self.plan.ram
        need = None if ram is None or ram.usable is None else ram.side.total
        if need is None:
            return cards
        compute = min(ram.side.compute, need) if ram is not None else 0
        return (*cards, DeviceCost(RAM, need - compute, 0, compute, 0))


@dataclass(frozen=True, slots=True)
class Member:
    """A model's place in the set."""

    model: PricedModel
    status: Status
    evicts: tuple[str, ...] = ()
    """The residents (ids, evicted first to last) it unloads to load; swaps only."""
    why: str = ""
    moved: bool = False
    """Resident on another card than its own plan chose (it did not fit beside the
    residents there): ``model`` is its plan on that card."""


@dataclass(frozen=True, slots=True)
class SetPlacement:
    """The set placed: the devices' budgets (fixed costs once) and each model's place."""

    devices: Mapping[str, DeviceBudget]
    """Each device by llama-server's name, with its one budget."""
    members: tuple[Member, ...]

    def used(self, device: str) -> int:
        """Bytes the resident models hold on ``device`` together."""
        return sum(
            cost.total
            for m in self.members
            if m.status == "resident"
            for cost in m.model.costs
            if cost.device == device
        )

    def ids(self, status: Status) -> tuple[str, ...]:
        return tuple(m.model.id for m in self.members if m.status == status)


def place_set(priced: Sequence[PricedModel], devices: Mapping[str, DeviceBudget]) -> SetPlacement:
    """Place ``priced`` (in priority order) on ``devices`` (llama-server's name → budget);
    the models' experts in system RAM are summed against the RAM free (:func:`ram_budget`)."""
    ram = ram_budget(priced)
    if ram is not None and RAM not in devices:
        devices = {**devices, RAM: ram}
    free = {name: budget.usable for name, budget in devices.items()}
    residents: list[PricedModel] = []
    places: list[tuple[PricedModel, Status, str]] = []
    for model in priced:
        if model.verdict != "fits":
            places.append((model, "does_not_fit", _alone_why(model)))
            continue
        short = _short(model, free)
        chosen: PricedModel | None = model
        why = "fits beside the models listed before it"
        if short:
            chosen = next((o for o in model.elsewhere if not _short(o, free)), None)
            why = f"{short}; on {', '.join(chosen.cards) if chosen else ''} it fits beside them"
        if chosen is not None:
            residents.append(chosen)
            for cost in chosen.costs:
                free[cost.device] -= cost.total
            places.append((chosen, "resident", why))
        else:
            places.append((model, "swaps", short))
    members: list[Member] = []
    for model, status, why in places:
        if status != "swaps":
            moved = status == "resident" and not any(model is p for p in priced)
            members.append(Member(model, status, why=why, moved=moved))
            continue
        evicts = _evictions(model, residents, free)
        gone = ", ".join(evicts)
        members.append(Member(model, status, evicts, f"{why}; loading it unloads {gone}"))
    return SetPlacement(dict(devices), tuple(members))


def _short(model: PricedModel, free: Mapping[str, int]) -> str:
    """Why ``model`` does not fit beside the residents ('' when it does)."""
    from homelab.units import format_bytes

    for cost in model.costs:
        left = free.get(cost.device, 0)
        if cost.total > left:
            return (
                f"needs {format_bytes(cost.total)} on {cost.device}, "
                f"{format_bytes(max(left, 0))} left beside the residents"
            )
    return ""


def _evictions(
    model: PricedModel, residents: Sequence[PricedModel], free: Mapping[str, int]
) -> tuple[str, ...]:
    """The residents to unload for ``model``, least recently used first (offline: the last
    listed first), until it fits; a model that fits alone always fits once all are gone."""
    left = dict(free)
    out: list[str] = []
    for resident in reversed(residents):
        if not _short(model, left):
            break
        out.append(resident.id)
        for cost in resident.costs:
            left[cost.device] = left.get(cost.device, 0) + cost.total
    return tuple(out)


def _alone_why(model: PricedModel) -> str:
    if model.plan is None:
        return f"does not fit even alone: {model.problem or 'no plan could be made'}"
    return "does not fit on the card even alone (its plan keeps layers in system RAM)"


def ram_budget(priced: Sequence[PricedModel]) -> DeviceBudget | None:
    """System RAM's budget for the experts the set keeps there: the RAM free when the first
    such plan was made, less its headroom (each plan alone was weighed against the same);
    None when no model keeps experts in RAM, or the RAM free was not known."""
    for model in priced:
        ram = None if model.plan is None else model.plan.ram
        if ram is not None and ram.available is not None:
            return DeviceBudget(
                kind="cpu",
                name="system RAM",
                total=ram.available,
                reserved=0,
                desktop=0,
                other=0,
                headroom=ram.headroom,
                display_active=False,
            )
    return None
