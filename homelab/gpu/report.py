"""What the GPU probe reports: plain values in bytes, ``None`` where NVML cannot see.

The probe (``homelab.gpu.probe``) builds these from NVML, a recorded snapshot or
system RAM; the planner (``homelab.plan``) reads them. Nothing here talks to a driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from homelab.errors import UsageError
from homelab.units import format_bytes

ProcessClass = Literal["desktop", "compute", "homelab", "other"]
"""desktop: compositors, X servers, browsers; compute: other CUDA programs;
homelab: engines homelab started; other: anything we cannot name."""

ReportSource = Literal["nvml", "replay", "synthetic", "cpu"]


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding memory on a card."""

    pid: int
    name: str | None
    """Process name (NVML, then psutil); ``None`` when neither can resolve it."""
    used_bytes: int | None
    """``None`` when NVML reports the value as not available (WDDM, WSL, MIG)."""
    kinds: str
    """``"C"`` compute, ``"G"`` graphics, ``"C+G"`` both (counted once)."""
    klass: ProcessClass


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One card, with the worst case over the sampling window."""

    index: int
    name: str
    uuid: str | None
    total: int
    reserved: int | None
    """Driver/firmware reservation (memory info v2); ``None`` on drivers with only v1."""
    used: int | None
    """Allocated memory at the last sample (v2 meaning: excludes ``reserved``)."""
    free: int
    """Free memory at the last sample."""
    free_min: int
    """Lowest free memory seen over the window: the figure to plan on."""
    desktop_now: int | None
    """Sum of desktop processes' memory at the last sample; ``None`` if NVML cannot attribute it."""
    desktop_peak: int | None
    """Highest desktop share seen over the window; ``None`` if unknown."""
    display_active: bool | None
    """True when this card drives a display; ``None`` if NVML cannot tell."""
    processes: tuple[GpuProcess, ...] | None
    """Processes at the last sample; ``None`` when the lists cannot be read."""
    samples: int
    """How many samples the window held."""
    warnings: tuple[str, ...] = ()
    """Sentences about what could not be read (permission, not supported, ...)."""
    compute_capability: tuple[int, int] | None = None
    """CUDA compute capability, (8, 6) for a 3090: what a CUDA build compiles for; None when
    NVML did not say (or a snapshot recorded before homelab asked)."""
    memory_bus_bits: int | None = None
    """Width of the memory bus in bits (384 for a 3090); None when NVML did not say."""
    memory_clock_mhz: int | None = None
    """Highest memory clock in MHz (9,751 for a 3090); None when NVML did not say."""

    @property
    def memory_bandwidth(self) -> int | None:
        """Peak memory bandwidth in bytes per second: bus bytes × clock × 2 (GDDR and HBM
        move data on both edges; 936 GB/s for a 3090, its data sheet's figure). None when
        either figure is unknown or not positive (a bad recording): never a made-up number."""
        bits, mhz = self.memory_bus_bits, self.memory_clock_mhz
        if bits is None or mhz is None or bits <= 0 or mhz <= 0:
            return None
        return bits // 8 * mhz * 1_000_000 * 2

    @property
    def homelab_bytes(self) -> int:
        """Memory held by homelab's own engines (planning a replacement may reuse it)."""
        return sum(p.used_bytes or 0 for p in self.processes or () if p.klass == "homelab")


@dataclass(frozen=True, slots=True)
class CpuMemory:
    """System RAM, for planning when there is no NVIDIA card."""

    total: int
    available: int


@dataclass(frozen=True, slots=True)
class GpuReport:
    """The machine as the planner sees it."""

    source: ReportSource
    devices: tuple[GpuDevice, ...]
    driver: str | None = None
    cuda_driver: str | None = None
    cpu: CpuMemory | None = None
    """Set when there is no usable NVIDIA card and planning falls back to RAM."""
    note: str | None = None
    """One sentence on why this report is what it is (e.g. no driver: planning for RAM)."""
    window_s: float = 0.0
    ram_low: CpuMemory | None = None
    """System RAM at its lowest ``available`` of the window, sampled with the card (the
    desktop's and every program's share at its worst, as the card's is): live probes only,
    a recording holds no RAM. The plan weighs RAM it keeps weights in against the worse of
    this and RAM at planning time."""
    warnings: tuple[str, ...] = ()
    """Sentences about the machine as a whole: a card that was skipped, a version NVML
    would not give. Per-card sentences are on :attr:`GpuDevice.warnings`."""


def synthetic_report(total_bytes: int) -> GpuReport:
    """A card of ``total_bytes`` with nothing else on it (``--vram 16GiB``).

    Raises:
        UsageError: the size is not positive.
    """
    if total_bytes <= 0:
        raise UsageError(f"A synthetic card needs a positive size, not {total_bytes} bytes.")
    device = GpuDevice(
        index=0,
        name=f"synthetic {format_bytes(total_bytes)} card",
        uuid=None,
        total=total_bytes,
        reserved=0,
        used=0,
        free=total_bytes,
        free_min=total_bytes,
        desktop_now=0,
        desktop_peak=0,
        display_active=False,
        processes=(),
        samples=0,
    )
    return GpuReport(
        source="synthetic",
        devices=(device,),
        note=f"Planning for a synthetic {format_bytes(total_bytes)} card, nothing else on it.",
    )
