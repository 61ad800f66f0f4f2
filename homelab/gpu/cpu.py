"""System RAM, for planning when there is no usable NVIDIA card.

``available`` is psutil's estimate of memory a new program can take without swapping
(Linux ``MemAvailable``, the same figure ollama plans CPU inference on), not ``free``,
which leaves out reclaimable page cache.
"""

from __future__ import annotations

from homelab.gpu.report import CpuMemory, GpuReport


def cpu_memory() -> CpuMemory:
    """Total and available system RAM in bytes."""
    import psutil  # not at import: only a plan without a card asks (start-up time)

    memory = psutil.virtual_memory()
    return CpuMemory(total=int(memory.total), available=int(memory.available))


def cpu_name() -> str:
    """This machine's CPU as a person names it: ``<model name> × <logical CPUs>`` (speed
    measured on one CPU is that CPU's: a bench result and a CPU plan's speed figures key on it)."""
    import os

    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name} × {os.cpu_count() or '?'}"


def cpu_report(note: str, warnings: tuple[str, ...] = ()) -> GpuReport:
    """A report with no cards: the planner plans for RAM and says ``note``."""
    return GpuReport(source="cpu", devices=(), cpu=cpu_memory(), note=note, warnings=warnings)
