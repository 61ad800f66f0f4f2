"""Which blocks go to the device(s): every one when a short conversation still fits beside
them, else the most that leave room for one (``-ngl K``, the offload ladder's last rung),
the rest on the CPU; and what each device then holds.

llama.cpp offloads the output layer first, then blocks from the last one down; a layer's
KV lives where the layer does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from homelab.errors import DoesNotFitError
from homelab.gguf.geometry import Geometry
from homelab.plan.budget import DeviceBudget, WeightPlacement
from homelab.plan.choose import MIN_CTX
from homelab.plan.devices import PlanDevice
from homelab.plan.engine_state import CUDA_CONTEXT_BYTES
from homelab.plan.fit import Candidate, Fitter
from homelab.plan.kv import KvSettings
from homelab.plan.layer_shapes import later_layers
from homelab.plan.split import DeviceShare, SplitFitter, split_notes
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.planner import PlanRequest

Verdict = Literal["fits", "partial", "does_not_fit"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the weights go, and the fitter that prices conversations in the room left."""

    fitter: Fitter
    n_gpu_layers: int | None
    """-ngl for a partial offload; None when every block is on the device(s)."""
    weights_on_device: int
    verdict: Verdict


def shortest(request: PlanRequest) -> int:
    """The shortest conversation a placement must leave room for: :data:`MIN_CTX`, or the
    context asked for when that is less (a device that holds what was asked is not left
    out, nor are blocks moved off it, for want of room nobody asked for)."""
    return MIN_CTX if request.ctx is None else min(MIN_CTX, request.ctx)


def place_blocks(
    geometry: Geometry,
    weights: WeightPlacement,
    base: KvSettings,
    request: PlanRequest,
    devices: tuple[PlanDevice, ...],
    budget: DeviceBudget,
    per_slot_wanted: int,
    warnings: list[str],
) -> Placement:
    """Every block on the device(s) when one short conversation still fits there; else as
    many blocks as leave room for one, the rest on the CPU (said in ``warnings``)."""
    on_gpu = budget.kind != "cpu"
    split = len(devices) > 1 or devices[0].remote
    weights_on_device = weights.on_device() if on_gpu else weights.total
    if split:
        fitter: Fitter = SplitFitter(geometry, devices, weights, base)
        warnings += split_notes(devices)
    else:
        room = budget.usable - weights_on_device
        fitter = _fitter(geometry, room, base, request, on_gpu, None, weights.n_cpu_moe)
    if not on_gpu or fitter.fits(min(shortest(request), per_slot_wanted), 1):
        return Placement(fitter, None, weights_on_device, "fits")
    want = min(per_slot_wanted, MIN_CTX) if request.ctx is None else request.ctx
    n_gpu_layers, fitter = _partial_offload(geometry, devices, budget, weights, base, request, want)
    weights_on_device = weights.on_device(n_gpu_layers - 1)
    shortfall = weights.on_device() - (budget.usable - CUDA_CONTEXT_BYTES)
    short = (
        f"short by {format_bytes(shortfall)} with the engine's state"
        if shortfall > 0
        else "with the engine's state and the least context"
    )
    warnings.append(
        f"The weights do not fit on the {'devices' if split else 'card'} ({short}): "
        f"{n_gpu_layers - 1} of {len(weights.per_block)} blocks go to the GPU, the rest run on the CPU. "
        "Expect generation several times slower than a model that fits."
    )
    return Placement(fitter, n_gpu_layers, weights_on_device, "partial")


def device_shares(
    place: Placement,
    candidate: Candidate,
    devices: tuple[PlanDevice, ...],
    weights: WeightPlacement,
) -> tuple[DeviceShare, ...]:
    """What each device holds: the split's shares, or the one device's blocks and KV."""
    if isinstance(place.fitter, SplitFitter):
        return place.fitter.shares(candidate)
    n_blocks = len(weights.per_block) if place.n_gpu_layers is None else place.n_gpu_layers - 1
    first = len(weights.per_block) - n_blocks
    share = DeviceShare(
        devices[0],
        first,
        n_blocks,
        True,
        place.weights_on_device,
        candidate.allocation.total,
        candidate.engine,
    )
    return (share,)


def _fitter(
    geometry: Geometry,
    room: int,
    base: KvSettings,
    request: PlanRequest,
    on_gpu: bool,
    n_gpu_layers: int | None,
    n_cpu_moe: int,
) -> Fitter:
    """The fitter for one placement, with the measurements of its flags (if any): those of
    its ``-ngl`` and its ``--n-cpu-moe`` (experts in RAM change the card's compute buffer)."""
    measurements = None
    if request.calibration is not None and request.measured_compute is None:
        device = "gpu" if on_gpu else "cpu"
        measurements = request.calibration.for_flags(device, base, n_gpu_layers, n_cpu_moe)
    return Fitter(
        geometry,
        room,
        base,
        on_gpu=on_gpu,
        measured_compute=request.measured_compute,
        measurements=measurements,
    )


def _partial_offload(
    geometry: Geometry,
    devices: tuple[PlanDevice, ...],
    budget: DeviceBudget,
    weights: WeightPlacement,
    base: KvSettings,
    request: PlanRequest,
    want: int,
) -> tuple[int, Fitter]:
    """Most blocks on the device(s) that still leave room for one conversation of ``want``
    tokens; (-ngl, the fitter for them). The rest run on the CPU.

    llama.cpp offloads the output layer first, then blocks from the last one down;
    a layer's KV lives where the layer does, so only offloaded blocks' KV counts here.
    One block fewer on the device only frees it (its weights and its KV), so the most
    that fit are found by bisection: a few plans, not one per block (a 40k-tensor
    header has thousands of blocks).
    """
    split = len(devices) > 1 or devices[0].remote
    n_blocks = len(weights.per_block)

    def fitting(gpu_blocks: int) -> Fitter | None:
        first = n_blocks - gpu_blocks
        if split:
            fitter: Fitter = SplitFitter(geometry, devices, weights, base, first_block=first)
        else:
            sub = later_layers(geometry, first)
            room = budget.usable - weights.on_device(gpu_blocks)
            fitter = _fitter(sub, room, base, request, True, gpu_blocks + 1, weights.n_cpu_moe)
        return fitter if fitter.fits(want, 1) else None

    best = fitting(0)
    if best is not None:
        lo, hi = 0, n_blocks  # fitting(lo) holds; the most that fit lie in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            found = fitting(mid)
            if found is None:
                hi = mid - 1
            else:
                lo, best = mid, found
        return lo + 1, best
    raise DoesNotFitError(
        f"not even the output layer of this model fits on {budget.name} "
        f"({format_bytes(budget.usable)} usable{' in all' if split else ''}, "
        f"output layer {format_bytes(weights.output)})",
        hint=f"Free {'memory on the devices' if split else 'GPU memory'} or pick a smaller model.",
        short_by=None
        if split or weights.output <= budget.usable
        else weights.output - budget.usable,
    )
