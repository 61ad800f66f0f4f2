"""Has the desktop grown into the headroom a plan left? (the compositor growth warning).

A plan is made on one look at the card: its budget (:class:`~homelab.plan.budget.DeviceBudget`)
holds the desktop's peak then, and the headroom left on top for the desktop to grow
into. While the engine serves (or the plan is on screen), :func:`desktop_growth`
compares the desktop's peak in the latest samples (``GpuDevice.desktop_peak`` of the
telemetry window) with that figure, and names the desktop process that grew most since
the report the plan was made on (a pid not in that report grew from nothing).

The rule, stated: the desktop has grown when its peak now is above the planned figure;
the growth *eats the headroom* (``alarming``) once it is more than
:data:`ALARM_FRACTION` of the planned headroom, and leaves the engine no slack at all
(``exhausted``) once it is the whole headroom or more. Pure: no driver, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.gpu.report import GpuDevice, GpuReport
from homelab.plan.budget import DeviceBudget, device_budget

ALARM_FRACTION = 0.25
"""Growth past this share of the planned headroom is worth telling the user about
(256 MiB of a desktop card's 1 GiB): less is the desktop's normal breathing."""


@dataclass(frozen=True, slots=True)
class ProcessGrowth:
    """One desktop process's memory at plan time and now."""

    pid: int
    name: str | None
    before: int | None
    """Bytes at plan time; 0 when it was not on the card then; None when unknown."""
    now: int

    @property
    def grown(self) -> int | None:
        return None if self.before is None else self.now - self.before


@dataclass(frozen=True, slots=True)
class DesktopGrowth:
    """How far the desktop has grown past the plan's figure on one card."""

    device: str
    """The budget's name (``GPU 0: NVIDIA GeForce RTX 3090``)."""
    planned_desktop: int
    desktop_peak: int
    headroom: int
    processes: tuple[ProcessGrowth, ...]
    """Desktop processes now, the one that grew most first (unknown growth last)."""

    @property
    def grown(self) -> int:
        """Bytes the desktop's peak is above the planned figure (≤ 0: not grown)."""
        return self.desktop_peak - self.planned_desktop

    @property
    def headroom_left(self) -> int:
        return self.headroom - max(self.grown, 0)

    @property
    def alarming(self) -> bool:
        """The growth eats a real part of the headroom (see the module docstring)."""
        return self.grown > ALARM_FRACTION * self.headroom

    @property
    def exhausted(self) -> bool:
        """The headroom is gone: the engine's own memory is what the desktop takes next."""
        return self.grown > 0 and self.grown >= self.headroom

    @property
    def culprit(self) -> ProcessGrowth | None:
        """The desktop process that grew most (or the biggest, when growth is unknown)."""
        return self.processes[0] if self.processes else None


def _device_of(report: GpuReport, budget: DeviceBudget) -> GpuDevice | None:
    for device in report.devices:
        if device_budget(report, device.index).name == budget.name:
            return device
    return None


def _desktop(device: GpuDevice | None) -> dict[int, tuple[str | None, int]]:
    if device is None or device.processes is None:
        return {}
    return {
        p.pid: (p.name, p.used_bytes)
        for p in device.processes
        if p.klass == "desktop" and p.used_bytes is not None
    }


def desktop_growth(
    budget: DeviceBudget, now: GpuReport, planned_on: GpuReport | None = None
) -> DesktopGrowth | None:
    """The desktop's growth on the plan's card since the plan (None: nothing to compare).

    Args:
        budget: the plan's budget (``Plan.budget``): the desktop figure and the headroom.
        now: the latest telemetry report (its window's ``desktop_peak``).
        planned_on: the report the plan was made on, to tell which process grew
            (without it, the biggest desktop process is named, growth unknown).

    Returns None for a system-RAM plan, a card the report no longer has, or a card
    NVML cannot attribute memory on (no desktop figure).
    """
    if budget.kind != "gpu":
        return None
    device = _device_of(now, budget)
    if device is None or device.desktop_peak is None:
        return None
    current = _desktop(device)
    baseline = None if planned_on is None else _desktop(_device_of(planned_on, budget))
    rows = [
        ProcessGrowth(
            pid,
            name,
            None if baseline is None else baseline.get(pid, (None, 0))[1],
            used,
        )
        for pid, (name, used) in current.items()
    ]
    rows.sort(key=lambda r: (r.grown is None, -(r.grown if r.grown is not None else r.now)))
    return DesktopGrowth(
        device=budget.name,
        planned_desktop=budget.desktop,
        desktop_peak=device.desktop_peak,
        headroom=budget.headroom,
        processes=tuple(rows),
    )
