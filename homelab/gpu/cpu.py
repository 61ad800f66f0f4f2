"""System RAM and the CPU, for planning what stays off the card.

``available`` is psutil's estimate of memory a new program can take without swapping
(Linux ``MemAvailable``, the same figure ollama plans CPU inference on), not ``free``,
which leaves out reclaimable page cache. The CPU's feature flags decide which weights
llama.cpp's CPU backend repacks (:mod:`homelab.plan.cpu_repack`).
"""

from __future__ import annotations

import platform
from pathlib import Path

from homelab.gpu.report import CpuMemory, GpuReport

CPUINFO = Path("/proc/cpuinfo")


def cpu_memory() -> CpuMemory:
    """Total and available system RAM in bytes."""
    import psutil  # not at import: only a plan without a card asks (start-up time)

    memory = psutil.virtual_memory()
    return CpuMemory(total=int(memory.total), available=int(memory.available))


def ram_now() -> CpuMemory | None:
    """:func:`cpu_memory`, or None when psutil cannot say (missing, failing, or figures no
    machine has): a RAM check that cannot be made is said so, never made against 0."""
    try:
        memory = cpu_memory()
    except Exception:  # psutil raises its own and OS errors where /proc is odd
        return None
    return memory if 0 <= memory.available <= memory.total and memory.total > 0 else None


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """The x86-64 CPU's feature flags (``avx2``, ``avx512f``, ...) from ``/proc/cpuinfo``;
    None on another CPU or where the file cannot be read."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    return parse_cpu_flags(text)


def parse_cpu_flags(text: str) -> frozenset[str] | None:
    """The first ``flags`` line of a ``/proc/cpuinfo`` text; None when there is none."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return None


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
