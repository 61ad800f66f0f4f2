"""The card a plan is made for: a synthetic size, a recorded snapshot, or the live probe."""

from __future__ import annotations

from homelab.gpu.report import GpuReport, synthetic_report
from homelab.plan.options import PlanOptions


def card_for(options: PlanOptions) -> GpuReport:
    """``options.vram`` (a synthetic empty card), ``options.gpu_snapshot`` (replay) or the probe."""
    if options.vram is not None:
        return synthetic_report(options.vram)
    from homelab.gpu.probe import probe  # pynvml: only for a real or recorded card

    return probe(snapshot=options.gpu_snapshot, window_s=options.sample_seconds)
