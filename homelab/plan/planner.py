"""The plan: from a model header and a card to llama-server's flags, with the working.

Weights + engine state + headroom come off the card; what is left holds
conversations; KV bytes per token say how many tokens that is; the workload says
how many conversations (slots) that makes; the flags follow. Every step is kept
as a row a person can check on paper (``Plan.steps``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

from homelab.errors import DoesNotFitError, UsageError
from homelab.gguf.geometry import Geometry, geometry_of
from homelab.gguf.header import GgufModel
from homelab.gguf.plausible import check_cache_types
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.block_offload import Verdict, device_shares, place_blocks, shortest
from homelab.plan.budget import DeviceBudget, WeightPlacement, pick_device, place_weights
from homelab.plan.choose import choose, wanted_per_slot
from homelab.plan.cpu_kv import choose_cpu_kv
from homelab.plan.cpu_kv_speed import FINDING, CpuKvSpeeds
from homelab.plan.decode_bound import DecodeBound
from homelab.plan.devices import (
    CUDA_ORDER_NOTE,
    PlanDevice,
    cpu_device,
    local_devices,
    remote_devices,
    total_budget,
)
from homelab.plan.experts_rung import RamProbe, at_worst, climb, honour, system_cpu, system_ram
from homelab.plan.fit import Candidate, ComputeMeasurements
from homelab.plan.kv import KvSettings
from homelab.plan.placement import keep_experts
from homelab.plan.ram_side import RamCheck, cpu_compute_estimate
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.split import DeviceShare, order_devices
from homelab.plan.steps import describe_plan
from homelab.plan.working import Step
from homelab.plan.workload import AGENT, Workload

MAX_SLOTS = 32
"""More slots than this only cut the same memory thinner; llama-server batches them no faster."""


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What the user asked for; None means "let the plan decide"."""

    workload: Workload = AGENT
    ctx: int | None = None
    """Total context (-c) wanted."""
    parallel: int | None = None
    type_k: str = "q8_0"
    type_v: str = "q8_0"
    kv_asked: bool = True
    """The person gave the cache types or flash attention; False: a plan for system RAM
    may choose them by speed (:mod:`homelab.plan.cpu_kv`), a card plan keeps these."""
    ubatch: int = 512
    batch: int = 2048
    unified: bool = False
    flash_attn: bool = True
    device_indices: tuple[int, ...] | None = None
    """The cards to plan on (NVML indices); None: the best one, or all when one is not enough."""
    max_slots: int = MAX_SLOTS
    measured_compute: int | None = None
    """One measured compute buffer for every candidate (a test's or a caller's figure)."""
    n_cpu_moe: int | None = None
    """Keep the routed experts of the first N blocks in system RAM (``--n-cpu-moe``;
    :data:`~homelab.plan.placement.EVERY_BLOCK` for ``--cpu-moe``); None or 0: none."""
    calibration: ComputeMeasurements | None = field(default=None, compare=False, repr=False)
    """Measured compute buffers by flags (the calibration store's); each candidate is priced
    with the one for its own flags, in the one planning pass. Ignored with ``measured_compute``."""


@dataclass(frozen=True, slots=True)
class Plan:
    """The result: settings, the budget they came from, and the working."""

    model_path: str
    geometry: Geometry
    request: PlanRequest
    budget: DeviceBudget
    weights: WeightPlacement
    weights_on_device: int
    n_gpu_layers: int | None
    """-ngl: None = every layer on the GPU (or a CPU plan); a number = partial offload."""
    candidate: Candidate
    tokens_fit: int
    """Total tokens of context that fit at this number of slots."""
    verdict: Verdict
    warnings: tuple[str, ...] = ()
    steps: tuple[Step, ...] = field(default=())
    """The working as rows (``homelab.plan.working.render_step`` makes each a line)."""
    devices: tuple[DeviceShare, ...] = ()
    """What each device holds, in llama-server's device order (the last has the output layer)."""
    rung: str = ""
    """Why the planner kept experts in system RAM on its own (the ladder's second rung)."""
    decode: DecodeBound | None = None
    """What it costs in decode speed (:mod:`homelab.plan.decode_bound`); None: not priced."""
    ram: RamCheck | None = None
    """The RAM side of a plan that keeps experts in RAM, weighed against the RAM free."""
    kv_choice: str = ""
    """Why a CPU plan took its KV cache type and flash attention (:mod:`~homelab.plan.cpu_kv`)."""

    @property
    def settings(self) -> KvSettings:
        return self.candidate.settings

    @property
    def on_gpu(self) -> bool:
        return self.budget.kind != "cpu"

    @property
    def split(self) -> bool:
        """Layers split over several devices, or placed on a worker: ``--device`` lists them."""
        return len(self.devices) > 1 or any(d.device.remote for d in self.devices)

    @property
    def left_for_conversations(self) -> int:
        """Budget after weights, headroom and the engine state that does not grow per token."""
        engine = self.candidate.engine
        return self.budget.usable - self.weights_on_device - (engine.total - engine.fa_scratch)


def make_plan(
    model: GgufModel,
    model_path: str,
    report: GpuReport,
    request: PlanRequest,
    *,
    remote: tuple[RemoteDevice, ...] = (),
    ram: Callable[[], CpuMemory | None] = system_ram,
    cpu: Callable[[], frozenset[str] | None] = system_cpu,
    kv_speeds: CpuKvSpeeds = FINDING,
) -> Plan:
    """Work out the plan. Raises DoesNotFitError with the numbers when nothing sensible fits.

    With no card asked for, a model that fits the card with most free memory is planned
    there alone; one that does not is split over every card. ``remote`` devices (RPC
    workers) always join the split. A MoE model with no experts setting climbs the offload
    ladder (:mod:`homelab.plan.experts_rung`); a plan with experts in RAM has its RAM side
    weighed against ``ram()`` (for the CPU whose flags ``cpu()`` gives).
    A RAM plan with no cache type asked takes the fastest RAM allows (:mod:`~homelab.plan.cpu_kv`).
    """
    geometry = geometry_of(model)
    cards = local_devices(report, request.device_indices)
    on_card = bool(remote or cards)
    if not on_card and not request.kv_asked:
        again = partial(make_plan, model, model_path, report, remote=remote, ram=ram, cpu=cpu)
        return choose_cpu_kv(request, again, lambda p: _whole(p, request, geometry), kv_speeds)
    if geometry.is_mla and request.type_k != request.type_v:
        raise UsageError(
            f"{geometry.arch} uses MLA (V is a view of K), so llama-server refuses different K and V "
            f"cache types ({request.type_k} / {request.type_v})",
            hint=f"Use one cache type for both K and V, e.g. {request.type_k}.",
        )
    check_cache_types(geometry.kv_layers, geometry.arch, request.type_k, request.type_v)
    # a CUDA card pads its tensors (a worker's too, when it joins cards: priced high, not low)
    placed, notes = place_weights(model, cuda=bool(cards)), list[str]()
    compute = cpu_compute_estimate(model, geometry, request.ubatch, request.batch)
    probe = RamProbe(compute, at_worst(ram, report.ram_low), cpu)
    if request.n_cpu_moe is None and on_card and any(placed.experts_per_block):

        def plan_with(weights: WeightPlacement, asked: PlanRequest) -> Plan:
            return _plan_for(model_path, geometry, weights, report, asked, remote)

        plan = climb(placed, request, plan_with, lambda p: _whole(p, request, geometry), probe)
    else:
        weights, notes = keep_experts(placed, request.n_cpu_moe, on_card=on_card)
        plan = honour(_plan_for(model_path, geometry, weights, report, request, remote), probe)
    if notes:
        plan = replace(plan, warnings=(*notes, *plan.warnings))
    if len(report.devices) > 1 and any(d.device.cuda for d in plan.devices):
        plan = replace(plan, warnings=(*plan.warnings, CUDA_ORDER_NOTE))
    # the working of the plan chosen, once: not of every plan the ladder weighed
    return _with_steps(plan)


def _plan_for(
    model_path: str,
    geometry: Geometry,
    weights: WeightPlacement,
    report: GpuReport,
    request: PlanRequest,
    remote: tuple[RemoteDevice, ...],
) -> Plan:
    """The cards asked for (and the workers); else the best card, or every card if needed."""
    cards = local_devices(report, request.device_indices)
    devices = remote_devices(remote) + cards
    if not devices:
        return _plan_on(model_path, geometry, weights, request, (cpu_device(report),))
    if request.device_indices is not None or len(cards) == 1 or remote:
        return _plan_on(model_path, geometry, weights, request, devices)
    best = pick_device(report, None)
    alone = next(d for d in cards if best is not None and d.index == best.index)
    try:
        single = _plan_on(model_path, geometry, weights, request, (alone,))
    except DoesNotFitError:
        single = None
    if single is not None and _whole(single, request, geometry):
        return single
    try:
        split = _plan_on(model_path, geometry, weights, request, devices)
    except DoesNotFitError:
        if single is None:
            raise
        return single
    note = f"It does not fit {alone.label} alone, so it is split over the {len(cards)} cards."
    return replace(split, warnings=(note, *split.warnings))


def _whole(plan: Plan, request: PlanRequest, geometry: Geometry) -> bool:
    """The plan serves the request in full: all on the device, each slot its workload's tokens."""
    wanted = wanted_per_slot(request, geometry, [])
    return plan.verdict == "fits" and (
        request.ctx is not None or plan.candidate.allocation.ctx_per_slot >= wanted
    )


def _plan_on(
    model_path: str,
    geometry: Geometry,
    weights: WeightPlacement,
    request: PlanRequest,
    devices: tuple[PlanDevice, ...],
) -> Plan:
    """The plan on these devices: one (a card, or system RAM), or a split over several;
    without its working (:func:`make_plan` renders that once, for the plan it keeps)."""
    base = KvSettings(
        n_ctx=0,
        n_seq=1,
        unified=request.unified,
        n_ubatch=request.ubatch,
        n_batch=request.batch,
        type_k=request.type_k,
        type_v=request.type_v,
        flash_attn=request.flash_attn,
    )
    warnings: list[str] = []
    per_slot_wanted = wanted_per_slot(request, geometry, warnings)
    if len(devices) > 1 or devices[0].remote:
        devices, notes = order_devices(geometry, devices, weights, base, shortest(request))
        warnings += notes
        if not devices:
            raise DoesNotFitError(
                "no device has room for its engine state and one block of this model",
                hint="Free memory on the cards or workers, or pick a smaller model.",
            )
    budget = total_budget(devices)
    place = place_blocks(
        geometry, weights, base, request, devices, budget, per_slot_wanted, warnings
    )
    candidate, tokens_fit = choose(place.fitter, request, geometry, per_slot_wanted, warnings)
    if candidate.measurement is not None and not candidate.measured_here:
        m = candidate.measurement
        warnings.append(
            f"The compute buffer was measured at -c {m.ctx} -np {m.parallel}, not at the plan's "
            f"-c {candidate.allocation.n_ctx} -np {candidate.settings.n_seq}, which no run has measured yet: "
            f"the plan takes its estimate corrected by that run's error ({m.error:+,} bytes)."
        )
    plan = Plan(
        model_path=model_path,
        geometry=geometry,
        request=request,
        budget=budget,
        weights=weights,
        weights_on_device=place.weights_on_device,
        n_gpu_layers=place.n_gpu_layers,
        candidate=candidate,
        tokens_fit=tokens_fit,
        verdict=place.verdict,
        warnings=tuple(warnings + list(geometry.notes) + list(budget.notes)),
        devices=device_shares(place, candidate, devices, weights),
    )
    return plan


def _with_steps(plan: Plan) -> Plan:
    return replace(plan, steps=tuple(describe_plan(plan)))
