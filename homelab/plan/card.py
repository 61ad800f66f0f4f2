"""The card a plan is made for: a synthetic size, a recorded snapshot, or the live probe."""

from __future__ import annotations

from homelab.gpu.report import GpuReport
from homelab.plan.options import PlanOptions


def card_for(options: PlanOptions) -> GpuReport:
    """``options.vram`` (a synthetic empty card), ``options.gpu_snapshot`` (replay) or the probe."""
    from homelab.gpu.probe import probe, synthetic_report

    if options.vram is not None:
        return synthetic_report(options.vram)
    return probe(snapshot=options.gpu_snapshot, window_s=options.sample_seconds)
