"""Probe the machine once: every NVIDIA card's memory over a window, or system RAM.

The error ladder and the reading of each card are :mod:`homelab.gpu.session`'s (shared
with the long-lived poller, ``homelab.gpu.telemetry``); this module only decides how
many samples a window holds and waits between them. With a snapshot the backend is
:class:`~homelab.gpu.replay.ReplayNvml`: the number of samples is the recording's and the
probe never sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from homelab.gpu import cpu
from homelab.gpu.nvml import NvmlBackend, RealNvml
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.gpu.session import open_session


def sample_count(window_s: float, interval_s: float) -> int:
    """Samples in a live window: one at 0 s, then one per ``interval_s`` up to ``window_s``."""
    if window_s <= 0 or interval_s <= 0:
        return 1
    return int(window_s / interval_s + 1e-9) + 1


def probe(
    *,
    snapshot: Path | None = None,
    window_s: float = 2.0,
    interval_s: float = 0.25,
    own_pids: frozenset[int] = frozenset(),
    backend: NvmlBackend | None = None,
    sleep: Callable[[float], Any] = time.sleep,
) -> GpuReport:
    """Read every NVIDIA card over ``window_s`` seconds and keep the worst moment.

    Args:
        snapshot: replay this recorded snapshot instead of asking the driver.
        window_s: how long to watch a live card.
        interval_s: time between live samples.
        own_pids: pids of engines homelab started (classed ``"homelab"``).
        backend: an explicit backend (wins over ``snapshot``).
        sleep: how to wait between live samples.

    Raises:
        GpuProbeError: the driver is present but unusable, or no card could be read.
    """
    if backend is None:
        backend = ReplayNvml(snapshot) if snapshot is not None else RealNvml()
    session = open_session(backend, own_pids)
    if isinstance(session, GpuReport):
        return session
    try:
        replay = session.replay
        samples = replay.sample_count if replay else sample_count(window_s, interval_s)
        ram: list[CpuMemory] = []
        for k in range(samples):
            session.sample(k * interval_s)
            if replay is None and (now := cpu.ram_now()) is not None:
                ram.append(now)  # RAM moves with the desktop too: its worst moment is kept
            if replay is None and k < samples - 1:
                sleep(interval_s)
        report = session.report(replay.window_s if replay else (samples - 1) * max(interval_s, 0.0))
        low = min(ram, key=lambda m: m.available) if ram else None
        return replace(report, ram_low=low) if low is not None else report
    finally:
        session.close()
