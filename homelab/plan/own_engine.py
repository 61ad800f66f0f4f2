"""Plan as if homelab's own engine were stopped: its memory counts as freed.

When an engine of ours runs and the person picks the next model, the card report
still shows the running engine's processes (classed ``"homelab"``), which
:func:`homelab.plan.budget.device_budget` would count among "other processes".
:func:`without_own_engines` returns the report with those processes removed and
their bytes given back to ``free`` and ``free_min`` — the card as it will be once
the engine is stopped for the switch.
"""

from __future__ import annotations

from dataclasses import replace

from homelab.gpu.report import GpuDevice, GpuReport


def without_own_engines(report: GpuReport) -> GpuReport:
    """``report`` as if every homelab engine on it were stopped (unchanged when none runs)."""
    devices = tuple(_freed(device) for device in report.devices)
    if devices == report.devices:
        return report
    return replace(report, devices=devices)


def _freed(device: GpuDevice) -> GpuDevice:
    held = device.homelab_bytes
    if device.processes is None or not any(p.klass == "homelab" for p in device.processes):
        return device
    return replace(
        device,
        free=min(device.total, device.free + held),
        free_min=min(device.total, device.free_min + held),
        used=None if device.used is None else max(0, device.used - held),
        processes=tuple(p for p in device.processes if p.klass != "homelab"),
    )
