"""Record what NVML says about this machine as a replayable snapshot (schema 1).

``homelab gpu --record FILE`` runs this against the real driver so a user's card can
become a test fixture or a bug report: every call the probe makes is recorded, a call
that raised is stored as ``{"error": "<NVMLError suffix>"}``, memory and process lists
once per sample. Replaying the file with :class:`~homelab.gpu.replay.ReplayNvml` gives
the probe the same answers, so it produces the same report.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from homelab.gpu.names import os_name_lookup
from homelab.gpu.nvml import NvmlBackend, NVMLError, error_name
from homelab.gpu.probe import sample_count
from homelab.gpu.replay import NO_MIG, ReplayNvml
from homelab.gpu.session import quiet_shutdown
from homelab.gpu.snapshot import SCHEMA, is_fault


def record_snapshot(
    backend: NvmlBackend,
    window_s: float,
    interval_s: float,
    *,
    sleep: Callable[[float], Any] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Sample ``backend`` over ``window_s`` and return the snapshot as a JSON-ready dict.

    A :class:`ReplayNvml` backend is re-recorded at its own sample count without
    sleeping (``t`` = sample × ``interval_s``), which makes round trips testable.
    """
    replay = backend if isinstance(backend, ReplayNvml) else None
    samples = replay.sample_count if replay else sample_count(window_s, interval_s)
    snapshot: dict[str, Any] = {
        "schema": SCHEMA,
        "comment": f"Recorded by `homelab gpu --record`: {samples} sample(s), "
        f"{interval_s:g} s apart.",
        "captured": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "host": dict(replay.data.get("host", {})) if replay else host_info(),
        "init": {"error": None},
    }
    try:
        backend.init()
    except NVMLError as error:
        snapshot["init"] = _fault(error)
        snapshot["devices"] = []
        return snapshot
    try:
        _record_started(backend, snapshot, samples, interval_s, replay is None, sleep, clock)
    finally:
        quiet_shutdown(backend)
    return snapshot


def host_info() -> dict[str, Any]:
    """OS, WSL and container flags: context for reading the numbers later."""
    release = platform.release().lower()
    return {
        "os": platform.system().lower(),
        "wsl": "microsoft" in release or "wsl" in release,
        "container": os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"),
    }


def _record_started(
    backend: NvmlBackend,
    snapshot: dict[str, Any],
    samples: int,
    interval_s: float,
    live: bool,
    sleep: Callable[[float], Any],
    clock: Callable[[], float],
) -> None:
    snapshot["system"] = {
        "driver": _ask(backend.driver_version),
        "cuda_driver": _ask(backend.cuda_driver_version),
    }
    count = _ask(backend.device_count)
    devices: list[dict[str, Any]] = []
    snapshot["devices"] = devices
    if isinstance(count, dict):
        snapshot["device_count"] = count
        return
    handles: dict[int, Any] = {}
    for index in range(count):
        device: dict[str, Any] = {"index": index}
        devices.append(device)
        handle = _ask(backend.device_handle, index)
        if is_fault(handle):
            device["handle"] = handle
            continue
        handles[index] = handle
        device["name"] = _ask(backend.device_name, handle)
        device["uuid"] = _ask(backend.device_uuid, handle)
        device["display_active"] = _ask(backend.display_active, handle)
        device["compute_capability"] = _ask(backend.compute_capability, handle)
        device["memory_bus_width"] = _ask(backend.memory_bus_width, handle)
        device["max_memory_clock"] = _ask(backend.max_memory_clock, handle)
        for key in ("memory_v2", "memory_v1", "graphics_procs", "compute_procs"):
            device[key] = []

    start = clock()
    for k in range(samples):
        t = round(clock() - start, 3) if live else round(k * interval_s, 3)
        for index, handle in handles.items():
            device = devices[index]
            device["memory_v2"].append(_memory(backend.memory_v2, handle, t, v2=True))
            device["memory_v1"].append(_memory(backend.memory_v1, handle, t, v2=False))
            device["graphics_procs"].append(_procs(backend.graphics_processes, handle))
            device["compute_procs"].append(_procs(backend.compute_processes, handle))
        if live and k < samples - 1:
            sleep(interval_s)

    _add_names(backend, devices)
    for index in handles:
        device = devices[index]
        for key in ("memory_v2", "memory_v1", "graphics_procs", "compute_procs"):
            device[key] = _collapse(device[key], memory=key.startswith("memory"))


def _ask(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except NVMLError as error:
        return _fault(error)


def _fault(error: BaseException) -> dict[str, Any]:
    name = error_name(error)
    return {"error": int(name) if name.lstrip("-").isdigit() else name}


def _memory(call: Callable[[Any], Any], handle: Any, t: float, *, v2: bool) -> dict[str, Any]:
    try:
        info = call(handle)
    except NVMLError as error:
        return _fault(error)
    entry: dict[str, Any] = {"t": t, "total": int(info.total)}
    if v2:
        entry["reserved"] = int(info.reserved)
    entry["used"] = None if info.used is None else int(info.used)
    entry["free"] = int(info.free)
    return entry


def _procs(call: Callable[[Any], Any], handle: Any) -> Any:
    try:
        entries = list(call(handle))
    except NVMLError as error:
        return _fault(error)
    except (OverflowError, ValueError):
        return {"error": "Unknown"}  # malformed list from drivers 535.43-535.86
    procs = []
    for entry in entries:
        proc: dict[str, Any] = {"pid": int(entry.pid), "used": entry.usedGpuMemory}
        gi = getattr(entry, "gpuInstanceId", NO_MIG)
        ci = getattr(entry, "computeInstanceId", NO_MIG)
        if gi not in (None, NO_MIG) or ci not in (None, NO_MIG):
            proc["gi"], proc["ci"] = gi, ci
        procs.append(proc)
    return procs


def _add_names(backend: NvmlBackend, devices: list[dict[str, Any]]) -> None:
    """Ask NVML and the OS once per pid, and write both into every entry of that pid."""
    os_lookup = os_name_lookup(backend)
    names: dict[int, tuple[Any, str | None]] = {}
    for device in devices:
        for key in ("graphics_procs", "compute_procs"):
            for sample in device.get(key, []):
                for proc in sample if isinstance(sample, list) else ():
                    pid = proc["pid"]
                    if pid not in names:
                        names[pid] = (_ask(backend.process_name, pid), os_lookup(pid))
                    proc["name"], proc["os_name"] = names[pid]


def _collapse(series: list[Any], *, memory: bool) -> Any:
    """Write a series that never changed as one value (easier to read and edit)."""
    first = series[0]
    if (is_fault(first) or not memory) and all(entry == first for entry in series):
        return first
    return series


def write_snapshot(snapshot: dict[str, Any], path: Path) -> None:
    """Write ``snapshot`` as indented JSON (raises ``OSError`` as the OS does)."""
    path.write_text(json.dumps(snapshot, indent=2) + "\n", encoding="utf-8")
