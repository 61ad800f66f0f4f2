"""Probe the machine: every NVIDIA card's memory over a window, or system RAM.

The error ladder (research nvml.md §1.5, wording in ``homelab.gpu.faults``):

1. ``nvmlInit`` raises ``LibraryNotFound``, or the driver sees 0 cards → a CPU report
   (``source="cpu"``) with a note saying why; that is a normal outcome, not an error.
2. ``DriverNotLoaded``, ``LibRmVersionMismatch``, ``NoPermission`` (or anything else) at
   init, or a failed device count → :class:`~homelab.errors.GpuProbeError`.
3. A field a board or driver does not report → ``None`` and a warning on that card.
4. ``GpuIsLost``/``Unknown`` on one card → that card skipped with a report warning;
   the others kept. No card left → ``GpuProbeError``.

With a snapshot the backend is :class:`~homelab.gpu.replay.ReplayNvml`: the number of
samples is the recording's and the probe never sleeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from homelab.gpu import faults
from homelab.gpu.cpu import cpu_report
from homelab.gpu.names import os_name_lookup, resolve_name
from homelab.gpu.nvml import NvmlBackend, NVMLError, RealNvml
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.report import GpuReport
from homelab.gpu.sampler import DeviceLost, DeviceSampler


def sample_count(window_s: float, interval_s: float) -> int:
    """Samples in a live window: one at 0 s, then one per ``interval_s`` up to ``window_s``."""
    if window_s <= 0 or interval_s <= 0:
        return 1
    return int(window_s / interval_s + 1e-9) + 1


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version ``12040`` as ``"12.4"``."""
    return f"{version // 1000}.{(version % 1000) // 10}"


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
    try:
        backend.init()
    except NVMLError as error:
        failure = faults.init_failure(error)
        if failure is None:
            return cpu_report(faults.NO_DRIVER_NOTE)
        raise failure from None
    try:
        return _probe_started(backend, window_s, interval_s, own_pids, sleep)
    finally:
        try:
            backend.shutdown()
        except NVMLError:
            pass  # Nothing useful to tell: the report is already built.


def _probe_started(
    backend: NvmlBackend,
    window_s: float,
    interval_s: float,
    own_pids: frozenset[int],
    sleep: Callable[[float], Any],
) -> GpuReport:
    warnings: list[str] = []
    try:
        count = backend.device_count()
    except NVMLError as error:
        raise faults.count_failure(error) from None
    driver = _system(backend.driver_version, "Driver version", warnings)
    cuda = _system(backend.cuda_driver_version, "CUDA driver version", warnings)
    if count == 0:
        return cpu_report(faults.NO_DEVICE_NOTE, tuple(warnings))

    name_of = _cached(backend)
    samplers: list[DeviceSampler] = []
    for index in range(count):
        try:
            samplers.append(DeviceSampler.open(backend, index, name_of, own_pids))
        except DeviceLost as lost:
            warnings.append(str(lost))

    replay = backend if isinstance(backend, ReplayNvml) else None
    samples = replay.sample_count if replay else sample_count(window_s, interval_s)
    for k in range(samples):
        for sampler in list(samplers):
            try:
                sampler.sample()
            except DeviceLost as lost:
                samplers.remove(sampler)
                warnings.append(str(lost))
        if replay is None and k < samples - 1 and samplers:
            sleep(interval_s)
    if not samplers:
        raise faults.all_lost_failure(tuple(warnings))

    return GpuReport(
        source="replay" if replay else "nvml",
        devices=tuple(s.report() for s in samplers),
        driver=driver,
        cuda_driver=None if cuda is None else cuda_version_text(cuda),
        note=f"Replayed from {replay.label}." if replay else None,
        window_s=replay.window_s if replay else (samples - 1) * max(interval_s, 0.0),
        warnings=tuple(warnings),
    )


def _system(call: Callable[[], Any], label: str, warnings: list[str]) -> Any:
    try:
        return call()
    except NVMLError as error:
        warnings.append(faults.field_warning(label, error))
        return None


def _cached(backend: NvmlBackend) -> Callable[[int], str | None]:
    """Resolve each pid's name once per probe (names do not change within a window)."""
    os_lookup = os_name_lookup(backend)
    names: dict[int, str | None] = {}

    def name_of(pid: int) -> str | None:
        if pid not in names:
            names[pid] = resolve_name(backend, pid, os_lookup)
        return names[pid]

    return name_of
