"""Replay a recorded GPU snapshot through the same :class:`NvmlBackend` protocol.

``ReplayNvml`` is the only stand-in for hardware: it answers each NVML call from the
JSON (schema in ``homelab.gpu.snapshot``) and, where the recording holds
``{"error": "<name>"}``, raises the *real* ``pynvml`` exception of that name, so the
probe's fallbacks run exactly as they would against a driver. It also keeps NVML's
rules that matter to callers: calls before ``init()`` raise ``Uninitialized``, an
unknown pid's name raises ``NotFound``.

Time: each ``memory_v2``/``memory_v1`` call on a device takes that device's next
recorded sample (holding the last); process lists answer for the sample the memory
calls last reached. :attr:`ReplayNvml.sample_count` tells the probe how many samples
the recording holds, so a replay never sleeps; :attr:`ReplayNvml.sample_times` tells the
telemetry poller when each was taken, so it plays them in time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from homelab.gpu.nvml import ProcessInfo, make_error
from homelab.gpu.snapshot import is_fault, is_series, load_snapshot

NO_MIG = 0xFFFFFFFF
"""NVML's GPU/compute instance id of a process outside any MIG instance."""


@dataclass(frozen=True, slots=True)
class ReplayHandle:
    """Opaque device handle of a replayed card."""

    index: int


@dataclass(slots=True)
class ReplayProcess:
    """One entry of a replayed process list, with pynvml's attribute names."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = NO_MIG
    computeInstanceId: int = NO_MIG


class ReplayNvml:
    """An :class:`~homelab.gpu.nvml.NvmlBackend` that answers from a recorded snapshot.

    Args:
        snapshot: the parsed JSON, or a path to it.

    Raises:
        GpuProbeError: the snapshot cannot be read or breaks the schema (named field).
    """

    def __init__(self, snapshot: dict[str, Any] | Path | str) -> None:
        self.data, self.label = load_snapshot(snapshot)
        self._devices: list[dict[str, Any]] = list(self.data.get("devices", []))
        self._v2_calls = [0] * len(self._devices)
        self._v1_calls = [0] * len(self._devices)
        self._initialized = 0
        self.init_calls = 0
        """``init`` calls that succeeded (a long-lived poller makes exactly one)."""
        self.shutdown_calls = 0

    # -- what a recording knows beyond NVML ---------------------------------------------

    @property
    def sample_count(self) -> int:
        """Samples the recording holds: the longest series of any device (at least 1)."""
        longest = 1
        for device in self._devices:
            for key in ("memory_v2", "memory_v1", "graphics_procs", "compute_procs"):
                value = device.get(key)
                if isinstance(value, list) and (key.startswith("memory") or is_series(value)):
                    longest = max(longest, len(value))
        return longest

    @property
    def window_s(self) -> float:
        """Seconds the recording spans: the latest ``t`` of any memory sample (0 if none)."""
        return max([0.0, *(t for t in self.sample_times if t is not None)])

    @property
    def sample_times(self) -> tuple[float | None, ...]:
        """When each sample was taken (its memory entries' latest ``t``; None if unrecorded)."""
        times: list[float | None] = []
        for k in range(self.sample_count):
            found = [
                float(t)
                for device in self._devices
                for key in ("memory_v2", "memory_v1")
                if isinstance(series := device.get(key), list)
                and series
                and isinstance(entry := series[min(k, len(series) - 1)], dict)
                and isinstance(t := entry.get("t"), (int, float))
                and not isinstance(t, bool)
            ]
            times.append(max(found) if found else None)
        return tuple(times)

    def os_process_name(self, pid: int) -> str | None:
        """What the recording machine's OS called ``pid`` (``None`` if it could not tell)."""
        for proc in self._all_procs():
            if proc["pid"] == pid and isinstance(proc.get("os_name"), str):
                return str(proc["os_name"])
        return None

    # -- NvmlBackend ------------------------------------------------------------------

    def init(self) -> None:
        error = self.data.get("init", {}).get("error")
        if error is not None:
            raise make_error(error)
        self._initialized += 1
        self.init_calls += 1

    def shutdown(self) -> None:
        self._check_init()
        self._initialized -= 1
        self.shutdown_calls += 1

    def driver_version(self) -> str:
        return str(self._answer(self.data["system"]["driver"]))

    def cuda_driver_version(self) -> int:
        return int(self._answer(self.data["system"]["cuda_driver"]))

    def device_count(self) -> int:
        return int(self._answer(self.data.get("device_count", len(self._devices))))

    def device_handle(self, index: int) -> ReplayHandle:
        self._check_init()
        if not 0 <= index < len(self._devices):
            raise make_error("InvalidArgument")
        if "handle" in self._devices[index]:
            raise make_error(self._devices[index]["handle"]["error"])
        return ReplayHandle(index)

    def device_name(self, handle: ReplayHandle) -> str:
        return str(self._answer(self._device(handle)["name"]))

    def device_uuid(self, handle: ReplayHandle) -> str:
        return str(self._answer(self._device(handle)["uuid"]))

    def compute_capability(self, handle: ReplayHandle) -> tuple[int, int]:
        """The recorded capability; snapshots recorded before homelab asked for it hold none,
        and replay that as NVML's own answer for a field a board does not report."""
        device = self._device(handle)
        if "compute_capability" not in device:
            raise make_error("NotSupported")
        major, minor = self._answer(device["compute_capability"])
        return int(major), int(minor)

    def memory_bus_width(self, handle: ReplayHandle) -> int:
        return self._optional_int(handle, "memory_bus_width")

    def max_memory_clock(self, handle: ReplayHandle) -> int:
        return self._optional_int(handle, "max_memory_clock")

    def _optional_int(self, handle: ReplayHandle, key: str) -> int:
        """A field snapshots recorded before homelab asked for it lack: replayed as NVML's own
        answer for a field a board does not report."""
        device = self._device(handle)
        if key not in device:
            raise make_error("NotSupported")
        return int(self._answer(device[key]))

    def display_active(self, handle: ReplayHandle) -> int:
        return int(self._answer(self._device(handle)["display_active"]))

    def memory_v2(self, handle: ReplayHandle) -> SimpleNamespace:
        device = self._device(handle)
        self._v2_calls[handle.index] += 1
        entry = self._nth(device["memory_v2"], self._v2_calls[handle.index] - 1)
        return SimpleNamespace(
            total=entry["total"],
            reserved=entry["reserved"],
            used=entry["used"],
            free=entry["free"],
        )

    def memory_v1(self, handle: ReplayHandle) -> SimpleNamespace:
        device = self._device(handle)
        self._v1_calls[handle.index] += 1
        n = self._v1_calls[handle.index] - 1
        if "memory_v1" in device:
            entry = self._nth(device["memory_v1"], n)
            return SimpleNamespace(total=entry["total"], used=entry["used"], free=entry["free"])
        entry = self._nth(device["memory_v2"], n)
        used = None if entry["used"] is None else entry["reserved"] + entry["used"]
        return SimpleNamespace(total=entry["total"], used=used, free=entry["free"])

    def compute_processes(self, handle: ReplayHandle) -> list[ProcessInfo]:
        return self._procs(handle, "compute_procs")

    def graphics_processes(self, handle: ReplayHandle) -> list[ProcessInfo]:
        return self._procs(handle, "graphics_procs")

    def process_name(self, pid: int) -> str:
        self._check_init()
        for proc in self._all_procs():
            if proc["pid"] == pid and "name" in proc:
                return str(self._answer(proc["name"]))
        raise make_error("NotFound")

    # -- helpers ------------------------------------------------------------------------

    def _check_init(self) -> None:
        if self._initialized <= 0:
            raise make_error("Uninitialized")

    def _answer(self, value: Any) -> Any:
        self._check_init()
        if is_fault(value):
            raise make_error(value["error"])
        return value

    def _device(self, handle: ReplayHandle) -> dict[str, Any]:
        self._check_init()
        if not isinstance(handle, ReplayHandle) or not 0 <= handle.index < len(self._devices):
            raise make_error("InvalidArgument")
        return self._devices[handle.index]

    def _nth(self, series: Any, n: int) -> dict[str, Any]:
        """Sample ``n`` of a series (holding the last); raise if it is an error."""
        if isinstance(series, dict) and not is_fault(series):
            series = [series]
        value = self._answer(series)
        entry = value[min(n, len(value) - 1)]
        return dict(self._answer(entry))

    def _sample_index(self, handle: ReplayHandle) -> int:
        return max(self._v2_calls[handle.index], self._v1_calls[handle.index], 1) - 1

    def _procs(self, handle: ReplayHandle, key: str) -> list[ProcessInfo]:
        value = self._answer(self._device(handle)[key])
        if is_series(value):
            value = self._answer(value[min(self._sample_index(handle), len(value) - 1)])
        return [
            ReplayProcess(p["pid"], p["used"], p.get("gi", NO_MIG), p.get("ci", NO_MIG))
            for p in value
        ]

    def _all_procs(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for device in self._devices:
            for key in ("graphics_procs", "compute_procs"):
                value = device.get(key)
                if not isinstance(value, list):
                    continue
                samples = value if is_series(value) else [value]
                for sample in samples:
                    if isinstance(sample, list):
                        found.extend(sample)
        return found
