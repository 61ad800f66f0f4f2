"""The plan: from a model header and a card to llama-server's flags, with the working.

Weights + engine state + headroom come off the card; what is left holds
conversations; KV bytes per token say how many tokens that is; the workload says
how many conversations (slots) that makes; the flags follow. Every step is kept
as a row a person can check on paper (``Plan.steps``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from homelab.errors import DoesNotFitError, UsageError
from homelab.gguf.geometry import Geometry, geometry_of
from homelab.gguf.header import GgufModel
from homelab.gguf.plausible import check_cache_types
from homelab.gpu.report import GpuReport
from homelab.plan.budget import DeviceBudget, WeightPlacement, device_budget, place_weights
from homelab.plan.engine_state import CUDA_CONTEXT_BYTES
from homelab.plan.fit import Candidate, ComputeMeasurements, Fitter
from homelab.plan.kv import CTX_PAD, KvSettings, pad
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.steps import describe_plan
from homelab.plan.working import Step
from homelab.plan.workload import AGENT, Workload

MAX_SLOTS = 32
"""More slots than this only cut the same memory thinner; llama-server batches them no faster."""
MIN_CTX = 4096
"""Below this a conversation is not worth serving: the plan says it does not fit."""

Verdict = Literal["fits", "partial", "does_not_fit"]


@dataclass(frozen=True, slots=True)
class PlanRequest:
    """What the user asked for; None means "let the plan decide"."""

    workload: Workload = AGENT
    ctx: int | None = None
    """Total context (-c) wanted."""
    parallel: int | None = None
    type_k: str = "q8_0"
    type_v: str = "q8_0"
    ubatch: int = 512
    batch: int = 2048
    unified: bool = False
    flash_attn: bool = True
    device_index: int | None = None
    max_slots: int = MAX_SLOTS
    measured_compute: int | None = None
    """One measured compute buffer for every candidate (a test's or a caller's figure)."""
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

    @property
    def settings(self) -> KvSettings:
        return self.candidate.settings

    @property
    def on_gpu(self) -> bool:
        return self.budget.kind == "gpu"

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
) -> Plan:
    """Work out the plan. Raises DoesNotFitError with the numbers when nothing sensible fits."""
    if remote:
        raise UsageError("planning over RPC devices is not built yet (issue 11, in progress)")
    geometry = geometry_of(model)
    if geometry.is_mla and request.type_k != request.type_v:
        raise UsageError(
            f"{geometry.arch} uses MLA (V is a view of K), so llama-server refuses different K and V "
            f"cache types ({request.type_k} / {request.type_v})",
            hint=f"Use one cache type for both K and V, e.g. {request.type_k}.",
        )
    check_cache_types(geometry.kv_layers, geometry.arch, request.type_k, request.type_v)
    budget = device_budget(report, request.device_index)
    weights = place_weights(model)
    on_gpu = budget.kind == "gpu"
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
    weights_on_device = weights.on_device() if on_gpu else weights.total
    fitter = _fitter(geometry, budget.usable - weights_on_device, base, request, on_gpu, None)
    warnings: list[str] = []
    n_gpu_layers: int | None = None
    verdict: Verdict = "fits"
    per_slot_wanted = _per_slot_wanted(request, geometry, warnings)

    if on_gpu and not fitter.fits(min(MIN_CTX, per_slot_wanted), 1):
        n_gpu_layers, fitter, weights_on_device = _partial_offload(
            geometry, budget, weights, base, request, per_slot_wanted
        )
        verdict = "partial"
        shortfall = weights.on_device() - (budget.usable - CUDA_CONTEXT_BYTES)
        warnings.append(
            f"The weights do not fit on the card (short by {shortfall:,} bytes with the engine's state): "
            f"{n_gpu_layers - 1} of {len(weights.per_block)} blocks go to the GPU, the rest run on the CPU. "
            "Expect generation several times slower than a model that fits."
        )

    candidate, tokens_fit = _choose(fitter, request, geometry, per_slot_wanted, warnings)
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
        weights_on_device=weights_on_device,
        n_gpu_layers=n_gpu_layers,
        candidate=candidate,
        tokens_fit=tokens_fit,
        verdict=verdict,
        warnings=tuple(warnings + list(geometry.notes) + list(budget.notes)),
    )
    return _with_steps(plan)


def _with_steps(plan: Plan) -> Plan:
    from dataclasses import replace

    return replace(plan, steps=tuple(describe_plan(plan)))


def _fitter(
    geometry: Geometry,
    room: int,
    base: KvSettings,
    request: PlanRequest,
    on_gpu: bool,
    n_gpu_layers: int | None,
) -> Fitter:
    """The fitter for one placement, with the measurements of its flags (if any)."""
    measurements = None
    if request.calibration is not None and request.measured_compute is None:
        device = "gpu" if on_gpu else "cpu"
        measurements = request.calibration.for_flags(device, base, n_gpu_layers)
    return Fitter(
        geometry,
        room,
        base,
        on_gpu=on_gpu,
        measured_compute=request.measured_compute,
        measurements=measurements,
    )


def _per_slot_wanted(request: PlanRequest, geometry: Geometry, warnings: list[str]) -> int:
    """Tokens each slot should hold: the workload's, capped at the trained context."""
    wanted = pad(request.workload.tokens_per_slot)
    trained_cap = geometry.trained_ctx // CTX_PAD * CTX_PAD
    if trained_cap and wanted > trained_cap:
        warnings.append(
            f"This model was trained on {geometry.trained_ctx:,} tokens: each conversation is capped there, "
            f"below the {request.workload.tokens_per_slot:,} the {request.workload.name} workload wants."
        )
        return trained_cap
    return wanted


def _choose(
    fitter: Fitter,
    request: PlanRequest,
    geometry: Geometry,
    per_slot: int,
    warnings: list[str],
) -> tuple[Candidate, int]:
    """Pick (context, slots) from the request and what fits; (candidate, tokens that fit)."""
    if request.ctx is not None:
        n_seq = request.parallel or 1
        candidate = fitter.candidate(request.ctx, n_seq)
        tokens_fit = fitter.max_ctx(n_seq)
        if candidate.cost > fitter.room:
            raise DoesNotFitError(
                f"a context of {request.ctx:,} tokens with {n_seq} slot(s) needs "
                f"{candidate.cost:,} bytes for KV and engine state; {max(fitter.room, 0):,} are free for them",
                hint=f"What fits with {n_seq} slot(s): a context of {tokens_fit} tokens."
                if tokens_fit
                else "Nothing fits: try a smaller quant or cache type q4_0.",
                short_by=candidate.cost - max(fitter.room, 0),
            )
        return candidate, tokens_fit

    if request.parallel is not None:
        n_seq = request.parallel
        tokens_fit = fitter.max_ctx(n_seq)
        wanted_total = per_slot * n_seq
        n_ctx = min(wanted_total, tokens_fit)
        if n_ctx < MIN_CTX * n_seq:
            raise _nothing_fits(fitter, n_seq)
        if n_ctx < wanted_total:
            warnings.append(
                f"{n_seq} slots of {per_slot:,} tokens do not fit: each slot gets {n_ctx // n_seq:,} tokens."
            )
        return fitter.candidate(n_ctx, n_seq), tokens_fit

    slots = fitter.max_slots(per_slot, max(1, request.max_slots))
    if slots == 0:
        tokens_fit = fitter.max_ctx(1, cap=per_slot)
        if tokens_fit < MIN_CTX:
            raise _nothing_fits(fitter, 1)
        warnings.append(
            f"Not even one {request.workload.name} conversation of {per_slot:,} tokens fits: "
            f"one slot of {tokens_fit:,} tokens instead."
        )
        return fitter.candidate(tokens_fit, 1), tokens_fit
    return fitter.candidate(per_slot * slots, slots), fitter.max_ctx(slots)


def _nothing_fits(fitter: Fitter, n_seq: int) -> DoesNotFitError:
    best = fitter.max_ctx(n_seq)
    return DoesNotFitError(
        f"with {n_seq} slot(s) only {best:,} tokens of context fit "
        f"({max(fitter.room, 0):,} bytes free for KV and engine state), below the {MIN_CTX:,}-token minimum",
        hint="Try a smaller quant, cache type q4_0, fewer slots, or close programs using the GPU.",
        short_by=fitter.candidate(MIN_CTX * n_seq, n_seq).cost - max(fitter.room, 0),
    )


def _partial_offload(
    geometry: Geometry,
    budget: DeviceBudget,
    weights: WeightPlacement,
    base: KvSettings,
    request: PlanRequest,
    per_slot: int,
) -> tuple[int, Fitter, int]:
    """Most blocks on the GPU that still leave room for one conversation; (-ngl, fitter, weights on GPU).

    llama.cpp offloads the output layer first, then blocks from the last one down;
    a layer's KV lives where the layer does, so only GPU blocks' KV counts here.
    """
    from dataclasses import replace

    n_blocks = len(weights.per_block)
    want = min(per_slot, MIN_CTX) if request.ctx is None else request.ctx
    for gpu_blocks in range(n_blocks, -1, -1):
        first = n_blocks - gpu_blocks
        sub = replace(
            geometry, layers=tuple(layer for layer in geometry.layers if layer.index >= first)
        )
        on_device = weights.on_device(gpu_blocks)
        fitter = _fitter(sub, budget.usable - on_device, base, request, True, gpu_blocks + 1)
        if fitter.fits(want, 1):
            return gpu_blocks + 1, fitter, on_device
    raise DoesNotFitError(
        f"not even the output layer of this model fits on {budget.name} "
        f"({budget.usable:,} bytes usable, output layer {weights.output:,} bytes)",
        hint="Free GPU memory or pick a smaller model.",
        short_by=weights.output - budget.usable if weights.output > budget.usable else None,
    )
