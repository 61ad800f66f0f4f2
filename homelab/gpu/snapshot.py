"""Load and check a recorded GPU snapshot (the JSON ``homelab gpu --record`` writes).

The schema (``schema: 1``) is the raw NVML view of one machine, see
``shared/research/nvml.md`` §4.2. On top of it:

* any value may be ``{"error": "<NVMLError suffix>"}`` (or an integer NVML code): replay
  then raises that real pynvml exception;
* ``memory_v2`` (and ``memory_v1``) is a list of samples, consumed one per sample, the last
  one held; ``memory_v1`` may be left out and is then derived from v2
  (v1 ``used`` = v2 ``reserved + used``, same ``total``/``free``);
* ``graphics_procs`` / ``compute_procs`` are either one list of processes (the same at every
  sample) or a list of such lists (one per sample, the last one held);
* a card whose ``handle`` is an error needs no other field;
* a process's ``used: null`` is NVML_VALUE_NOT_AVAILABLE; ``name`` is what
  ``nvmlSystemGetProcessName`` said (a string or an error); ``os_name`` is what the OS said
  at recording time (used instead of asking this machine's OS about a foreign pid);
* unknown keys (``comment``, ``temp_c``, ...) are ignored.

A malformed file is a :class:`~homelab.errors.GpuProbeError` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from homelab.errors import GpuProbeError
from homelab.files import FileTooLargeError, read_regular
from homelab.gpu.nvml import is_error_name

SCHEMA = 1
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
"""Far above a recording of hours of samples; what ``/dev/zero`` or a model file would exceed."""
_HINT = "Fix that field, or record a fresh snapshot with `homelab gpu --record FILE`."


def load_snapshot(snapshot: dict[str, Any] | Path | str) -> tuple[dict[str, Any], str]:
    """Read (if a path) and check a snapshot; return it and a label for messages.

    Raises:
        GpuProbeError: the file cannot be read, is not JSON, or breaks the schema.
    """
    if isinstance(snapshot, dict):
        label = "GPU snapshot"
        data: Any = snapshot
    else:
        path = Path(snapshot)
        label = f"GPU snapshot {path}"
        data = _parse(_read(path, label), label)
    _Checker(label).snapshot(data)
    return data, label


def _read(path: Path, label: str) -> str:
    """The snapshot file's text: a regular file of at most ``MAX_SNAPSHOT_BYTES``, UTF-8."""
    try:
        raw = read_regular(path, MAX_SNAPSHOT_BYTES)
    except FileTooLargeError:
        raise GpuProbeError(
            f"{label} is larger than {MAX_SNAPSHOT_BYTES:,} bytes; no recorded snapshot is",
            hint="Point the GPU snapshot setting at a file `homelab gpu --record` wrote.",
        ) from None
    except OSError as error:
        raise GpuProbeError(
            f"Cannot read {label}: {error.strerror or error}.",
            hint="Check the path of the GPU snapshot.",
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise GpuProbeError(
            f"{label} is not a snapshot: byte {error.start:,} is not UTF-8 text "
            f"({raw[error.start : error.start + 4]!r}); a snapshot is JSON",
            hint="Point the GPU snapshot setting at a file `homelab gpu --record` wrote.",
        ) from None


def _parse(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise GpuProbeError(
            f"{label} is not valid JSON ({error.msg} at line {error.lineno}).", hint=_HINT
        ) from None
    except (ValueError, RecursionError) as error:  # a 5000-digit number, arrays nested 10^5 deep
        raise GpuProbeError(
            f"{label} is not a snapshot JSON can hold: {error}.", hint=_HINT
        ) from None


def is_fault(value: Any) -> bool:
    """True for ``{"error": ...}``: the recorded call raised that NVML error."""
    return isinstance(value, dict) and "error" in value


def is_series(procs: list[Any]) -> bool:
    """True when a process list is a per-sample series (a list of lists / faults)."""
    return bool(procs) and all(isinstance(p, list) or is_fault(p) for p in procs)


class _Checker:
    """Walks a snapshot and raises one GpuProbeError at the first bad field."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, where: str, problem: str) -> GpuProbeError:
        return GpuProbeError(f"{self.label}: {where} {problem}.", hint=_HINT)

    def snapshot(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise self.fail("the top level", "should be a JSON object")
        if data.get("schema") != SCHEMA:
            raise self.fail("schema", f"should be {SCHEMA}, not {data.get('schema')!r}")
        init = data.get("init", {"error": None})
        if not isinstance(init, dict) or "error" not in init:
            raise self.fail("init", 'should be {"error": null} or {"error": "<NVMLError name>"}')
        if init["error"] is not None:
            self.error_name("init.error", init["error"])
            return
        system = data.get("system")
        if not isinstance(system, dict):
            raise self.fail("system", "should be an object")
        for key in ("driver", "cuda_driver"):
            self.value(system, key, f"system.{key}", str if key == "driver" else int)
        if "device_count" in data:
            self.value(data, "device_count", "device_count", int)
        devices = data.get("devices")
        if not isinstance(devices, list):
            raise self.fail("devices", "should be a list")
        for i, device in enumerate(devices):
            self.device(device, f"devices[{i}]", i)

    def device(self, device: Any, where: str, position: int) -> None:
        if not isinstance(device, dict):
            raise self.fail(where, "should be an object")
        if device.get("index") != position:
            raise self.fail(f"{where}.index", f"should be {position}, not {device.get('index')!r}")
        if "handle" in device:
            # The card could not be opened: nothing else was (or can be) recorded.
            self.fault(device["handle"], f"{where}.handle")
            return
        self.value(device, "name", f"{where}.name", str)
        self.value(device, "uuid", f"{where}.uuid", str)
        self.value(device, "display_active", f"{where}.display_active", int)
        for key in ("memory_bus_width", "max_memory_clock"):  # absent from older recordings
            if key in device:
                self.value(device, key, f"{where}.{key}", int)
                if not is_fault(device[key]) and device[key] < 0:
                    raise self.fail(f"{where}.{key}", f"should be 0 or more, not {device[key]}")
        v2 = self.memory(device, "memory_v2", where, ("total", "reserved", "used", "free"))
        if "memory_v1" in device or is_fault(v2):
            self.memory(device, "memory_v1", where, ("total", "used", "free"))
        for key in ("graphics_procs", "compute_procs"):
            self.procs(device, key, f"{where}.{key}")

    def memory(self, device: dict[str, Any], key: str, where: str, fields: tuple[str, ...]) -> Any:
        where = f"{where}.{key}"
        if key not in device:
            raise self.fail(where, "is missing")
        value = device[key]
        if is_fault(value):
            self.fault(value, where)
            return value
        samples = [value] if isinstance(value, dict) else value
        if not isinstance(samples, list) or not samples:
            raise self.fail(where, "should be a non-empty list of samples or an error object")
        for i, sample in enumerate(samples):
            at = f"{where}[{i}]"
            if is_fault(sample):
                self.fault(sample, at)
                continue
            if not isinstance(sample, dict):
                raise self.fail(at, "should be an object")
            for name in fields:
                if name not in sample:
                    raise self.fail(f"{at}.{name}", "is missing")
                if sample[name] is None and name == "used":
                    continue
                self.size(sample[name], f"{at}.{name}")
            if sample["free"] > sample["total"]:
                raise self.fail(
                    f"{at}.free", f"({sample['free']}) exceeds total ({sample['total']})"
                )
        return value

    def procs(self, device: dict[str, Any], key: str, where: str) -> None:
        if key not in device:
            raise self.fail(where, "is missing")
        value = device[key]
        if is_fault(value):
            self.fault(value, where)
            return
        if not isinstance(value, list):
            raise self.fail(
                where, "should be a list of processes, a list of such lists, or an error"
            )
        if any(isinstance(p, list) for p in value) and not is_series(value):
            raise self.fail(where, "mixes per-sample lists with single process objects")
        if is_series(value):
            for i, sample in enumerate(value):
                if is_fault(sample):
                    self.fault(sample, f"{where}[{i}]")
                else:
                    for j, proc in enumerate(sample):
                        self.proc(proc, f"{where}[{i}][{j}]")
        else:
            for j, proc in enumerate(value):
                self.proc(proc, f"{where}[{j}]")

    def proc(self, proc: Any, where: str) -> None:
        if not isinstance(proc, dict) or is_fault(proc):
            raise self.fail(where, "should be a process object with pid and used")
        pid = proc.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
            raise self.fail(f"{where}.pid", f"should be a process id, not {pid!r}")
        if "used" not in proc:
            raise self.fail(f"{where}.used", "is missing (null means not available)")
        if proc["used"] is not None:
            self.size(proc["used"], f"{where}.used")
        if "name" in proc:
            self.value(proc, "name", f"{where}.name", str)
        if proc.get("os_name") is not None and not isinstance(proc["os_name"], str):
            raise self.fail(f"{where}.os_name", "should be a string or null")

    def value(self, parent: dict[str, Any], key: str, where: str, kind: type) -> None:
        if key not in parent:
            raise self.fail(where, "is missing")
        value = parent[key]
        if is_fault(value):
            self.fault(value, where)
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(where, f"should be {kind.__name__} or an error object, not {value!r}")

    def fault(self, value: Any, where: str) -> None:
        if not is_fault(value):
            raise self.fail(where, 'should be an error object like {"error": "GpuIsLost"}')
        self.error_name(f"{where}.error", value["error"])

    def error_name(self, where: str, name: Any) -> None:
        if not is_error_name(name):
            raise self.fail(where, f"names no NVML error ({name!r}; e.g. NotSupported, GpuIsLost)")

    def size(self, value: Any, where: str) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise self.fail(where, f"should be a whole number of bytes >= 0, not {value!r}")
