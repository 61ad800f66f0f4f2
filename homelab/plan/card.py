"""The card a plan is made for: a synthetic size, a recorded snapshot, or the live probe."""

from __future__ import annotations

from homelab.gpu.report import GpuReport, synthetic_report
from homelab.plan.options import PlanOptions


def card_for(options: PlanOptions) -> GpuReport:
    """``card.vram`` (a synthetic empty card), ``card.cpu`` (system RAM), ``card.gpu_snapshot``
    (replay) or the probe."""
    card = options.card
    if card.vram is not None:
        return synthetic_report(card.vram)
    if card.cpu:
        from homelab.gpu.cpu import cpu_report

        return cpu_report("Planning for system RAM, as asked (--cpu): the card is not used.")
    from homelab.gpu.probe import probe  # pynvml: only for a real or recorded card

    return probe(snapshot=card.gpu_snapshot, window_s=card.sample_seconds)
