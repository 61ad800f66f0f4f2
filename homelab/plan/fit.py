"""Searching for the context and slots that fit: pure arithmetic over ``kv_allocation``.

The cost of a setting is everything that grows with it: the KV cache (full,
sliding-window, recurrent) and the engine state (compute buffer, CUDA context).
Costs are evaluated with the exact allocation function, never a linearised guess,
so padding, SWA windows per stream and per-sequence recurrent state all count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from homelab.gguf.geometry import Geometry
from homelab.plan.engine_state import EngineState, estimate_engine_state
from homelab.plan.kv import CTX_PAD, KvAllocation, KvSettings, kv_allocation

MAX_TOTAL_CTX = 1 << 24
"""Upper bound of the search (16.7M tokens): beyond any card homelab plans for."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """A compute buffer an earlier run measured, and the flags it was measured at."""

    measured_compute: int
    """The logged buffer less the flash-attention scratch the plan prices per token."""
    ctx: int
    parallel: int
    error: int = 0
    """Logged minus predicted compute buffer at those flags: how far the estimate was off."""


MeasurementFor = Callable[[int, int], "Measurement | None"]
"""``(allocated n_ctx, slots) -> the measurement that applies``, for one fitter's fixed flags."""


class ComputeMeasurements(Protocol):
    """Measured compute buffers of one model under one engine build (the calibration store's)."""

    def for_flags(
        self, device: str, base: KvSettings, n_gpu_layers: int | None, n_cpu_moe: int = 0
    ) -> MeasurementFor | None:
        """The lookup for candidates of ``base``'s flags (context and slots vary), or None."""
        ...


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (context, slots) setting with what it costs on the device."""

    settings: KvSettings
    allocation: KvAllocation
    engine: EngineState
    measurement: Measurement | None = None
    """The measurement ``engine`` is priced by: at these flags, its buffer; at neighbouring
    flags, the estimate corrected by that run's error. None: the estimate."""

    @property
    def measured_here(self) -> bool:
        """The measurement (if any) was made at exactly this context and these slots."""
        m = self.measurement
        return m is not None and (m.ctx, m.parallel) == (self.allocation.n_ctx, self.settings.n_seq)

    @property
    def cost(self) -> int:
        return self.allocation.total + self.engine.total


class Fitter:
    """Answers "does this fit?" for one model on one device budget."""

    def __init__(
        self,
        geometry: Geometry,
        room: int,
        base: KvSettings,
        *,
        on_gpu: bool,
        measured_compute: int | None = None,
        measurements: MeasurementFor | None = None,
    ) -> None:
        """``measured_compute`` prices every candidate at one figure; else ``measurements``
        gives each candidate the measurement that applies to its flags (if any): one made
        at exactly its context and slots prices it as logged; one made at neighbouring
        context or slots corrects the candidate's estimate by that run's error."""
        self.geometry = geometry
        self.room = room
        """Bytes for KV + engine state: the budget left after weights and headroom."""
        self.base = base
        self.on_gpu = on_gpu
        self.measured_compute = measured_compute
        self.measurements = None if measured_compute is not None else measurements

    def candidate(self, n_ctx: int, n_seq: int) -> Candidate:
        settings = replace(self.base, n_ctx=n_ctx, n_seq=n_seq)
        allocation = kv_allocation(self.geometry, settings)
        engine = estimate_engine_state(
            self.geometry,
            allocation,
            settings,
            on_gpu=self.on_gpu,
            measured_compute=self.measured_compute,
        )
        measurement = None
        if self.measurements is not None:
            measurement = self.measurements(allocation.n_ctx, n_seq)
            if measurement is not None:
                if (measurement.ctx, measurement.parallel) == (allocation.n_ctx, n_seq):
                    measured = measurement.measured_compute
                else:
                    estimate = engine.compute_buffer - engine.fa_scratch
                    measured = max(estimate + measurement.error, 0)
                engine = replace(engine, measured_compute=measured)
        return Candidate(settings, allocation, engine, measurement)

    def fits(self, n_ctx: int, n_seq: int) -> bool:
        return self.candidate(n_ctx, n_seq).cost <= self.room

    def max_ctx(self, n_seq: int, *, cap: int = MAX_TOTAL_CTX) -> int:
        """Largest total context (a multiple of 256 per slot) that fits with ``n_seq`` slots; 0 if none."""
        step = CTX_PAD * n_seq
        lo, hi = 0, cap // step
        if hi == 0 or not self.fits(step, n_seq):
            return 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fits(mid * step, n_seq):
                lo = mid
            else:
                hi = mid - 1
        return lo * step

    def max_slots(self, per_slot: int, limit: int) -> int:
        """Most slots of ``per_slot`` tokens each that fit, up to ``limit``; 0 if not even one."""
        best = 0
        lo, hi = 1, limit
        while lo <= hi:
            mid = (lo + hi) // 2
            if self.fits(per_slot * mid, mid):
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        return best
