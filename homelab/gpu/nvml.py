"""The NVML calls homelab makes, as a protocol, and the one class that makes them for real.

This is the only module that imports ``pynvml`` (PyPI ``nvidia-ml-py``). Importing it
never touches the driver: the shared library is loaded inside ``nvmlInit()``, so this
module is safe to import on a machine without a GPU.

Everything that decides what the numbers *mean* (v2 → v1 fallback, ``None`` handling,
classification, the worst case over a window) lives in ``homelab.gpu.probe`` and its
helpers; a backend only answers questions. Two backends implement :class:`NvmlBackend`:
:class:`RealNvml` here and ``homelab.gpu.replay.ReplayNvml`` (recorded snapshots). Both
raise the real ``pynvml.NVMLError_*`` classes, so the probe's error handling is the same
code in tests and on a real card.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import pynvml

NVMLError = pynvml.NVMLError
"""Base class of every NVML failure; ``NVMLError(code)`` returns the matching subclass."""

_PREFIX = "NVMLError_"


def error_name(error: BaseException) -> str:
    """The NVML error's class suffix (``"NotSupported"``), or its numeric code as text.

    Instances are compared by name, not put in sets: ``NVMLError`` defines ``__eq__``
    without ``__hash__``, so its instances are unhashable.
    """
    name = type(error).__name__
    if name.startswith(_PREFIX):
        return name[len(_PREFIX) :]
    return str(getattr(error, "value", name))


def make_error(name: str | int) -> Exception:
    """The real pynvml exception for a class suffix (``"GpuIsLost"``) or a numeric code.

    Raises:
        ValueError: ``name`` is neither a known suffix nor an integer code.
    """
    if isinstance(name, bool):
        raise ValueError(f"not an NVML error: {name!r}")
    if isinstance(name, int):
        return NVMLError(name)
    cls = getattr(pynvml, _PREFIX + str(name), None)
    if not (isinstance(cls, type) and issubclass(cls, NVMLError)):
        raise ValueError(f"not an NVML error name: {name!r}")
    return cls()


def is_error_name(name: object) -> bool:
    """True when ``name`` names a pynvml error class or is an integer code."""
    try:
        make_error(name)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True


class MemoryInfo(Protocol):
    """``nvmlMemory_t`` / ``nvmlMemory_v2_t`` (bytes). v1 has no ``reserved``."""

    total: int
    free: int
    used: int


class ProcessInfo(Protocol):
    """One entry of a running-process list. ``usedGpuMemory`` is ``None`` when NVML says
    "not available" (WDDM on Windows, WSL2, MIG without privilege)."""

    pid: int
    usedGpuMemory: int | None


@runtime_checkable
class NvmlBackend(Protocol):
    """The NVML questions the probe asks: each method is one pynvml call.

    Every method may also raise ``GpuIsLost`` (the card fell off the bus, Xid 79) or
    ``Unknown`` (NVML could not classify the failure), and ``Uninitialized`` if called
    before :meth:`init`.
    """

    def init(self) -> None:
        """``nvmlInit``: load ``libnvidia-ml`` and attach to the driver.

        Raises:
            NVMLError_LibraryNotFound: ``libnvidia-ml.so.1`` / ``nvml.dll`` is not there (no
                proprietary driver, or a container started without the NVIDIA toolkit).
            NVMLError_DriverNotLoaded: the library exists but the kernel module is not
                loaded (nouveau owns the card, Secure Boot refused the module, reboot pending).
            NVMLError_LibRmVersionMismatch: the user-space library was upgraded while the old
                kernel module still runs.
            NVMLError_NoPermission: ``/dev/nvidia*`` is not accessible to this user.
        """
        ...

    def shutdown(self) -> None:
        """``nvmlShutdown``: release one :meth:`init` (NVML reference-counts them)."""
        ...

    def driver_version(self) -> str:
        """``nvmlSystemGetDriverVersion``, e.g. ``"590.44.01"``."""
        ...

    def cuda_driver_version(self) -> int:
        """``nvmlSystemGetCudaDriverVersion``, e.g. ``12040`` for CUDA 12.4.

        Raises:
            NVMLError_FunctionNotFound: a driver too old to report it.
        """
        ...

    def compute_capability(self, handle: Any) -> tuple[int, int]:
        """``nvmlDeviceGetCudaComputeCapability``: (8, 6) for a 3090, (8, 9) for a 40-series
        card; what a CUDA build compiles device code for."""
        ...

    def memory_bus_width(self, handle: Any) -> int:
        """``nvmlDeviceGetMemoryBusWidth``: the memory bus in bits (384 for a 3090); with the
        memory clock it gives the card's peak bandwidth, what bounds decode speed.

        Raises:
            NVMLError_NotSupported: boards or drivers that do not report it.
        """
        ...

    def max_memory_clock(self, handle: Any) -> int:
        """``nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)``: the memory clock in MHz (9,751 for a
        3090); GDDR and HBM move data on both edges, so the bus moves twice this per pin.

        Raises:
            NVMLError_NotSupported: boards or drivers that do not report it.
        """
        ...

    def device_count(self) -> int:
        """``nvmlDeviceGetCount``: cards NVML sees (``CUDA_VISIBLE_DEVICES`` has no effect)."""
        ...

    def device_handle(self, index: int) -> Any:
        """``nvmlDeviceGetHandleByIndex`` (NVML/PCI order, not CUDA order).

        Raises:
            NVMLError_NoPermission: this user may not talk to that card.
        """
        ...

    def device_name(self, handle: Any) -> str:
        """``nvmlDeviceGetName``, e.g. ``"NVIDIA GeForce RTX 3090"``."""
        ...

    def device_uuid(self, handle: Any) -> str:
        """``nvmlDeviceGetUUID``: the stable id (``"GPU-…"``), better than the index."""
        ...

    def memory_v2(self, handle: Any) -> MemoryInfo:
        """``nvmlDeviceGetMemoryInfo_v2``: ``total, reserved, used, free`` in bytes.

        Raises:
            NVMLError_FunctionNotFound: drivers before 510.39 lack the ``_v2`` symbol.
            NVMLError_Unknown: seen under WSL2 (nvitop PR#30); callers retry with v1.
            NVMLError_NotSupported: integrated/UMA parts, whose memory is system RAM.
        """
        ...

    def memory_v1(self, handle: Any) -> MemoryInfo:
        """``nvmlDeviceGetMemoryInfo`` (v1): ``used`` includes the driver's reservation.

        Raises:
            NVMLError_NotSupported: integrated/UMA parts, whose memory is system RAM.
        """
        ...

    def display_active(self, handle: Any) -> int:
        """``nvmlDeviceGetDisplayActive``: 1 when a display is initialised on this card.

        Raises:
            NVMLError_NotSupported: boards or drivers that do not report it.
        """
        ...

    def compute_processes(self, handle: Any) -> list[ProcessInfo]:
        """``nvmlDeviceGetComputeRunningProcesses``: CUDA contexts on the card.

        Raises:
            NVMLError_NoPermission: other users' processes, MIG aggregates without privilege.
            NVMLError_NotSupported: boards that do not list them.
        """
        ...

    def graphics_processes(self, handle: Any) -> list[ProcessInfo]:
        """``nvmlDeviceGetGraphicsRunningProcesses``: GL/Vulkan clients (compositors, browsers).

        Raises:
            NVMLError_NoPermission: other users' processes.
            NVMLError_NotSupported: boards that do not list them.
        """
        ...

    def process_name(self, pid: int) -> str:
        """``nvmlSystemGetProcessName``.

        Raises:
            NVMLError_NotFound: the process exited between the list and this call, or the
                pid lives in another PID namespace (containers without ``--pid=host``).
            NVMLError_NoPermission: a process of another user.
        """
        ...


class RealNvml:
    """The live driver: each method is the pynvml call named on :class:`NvmlBackend`.

    One addition to a pure pass-through: process lists try the ``_v3`` call and fall
    back to ``_v2`` on drivers before 510.39. Drivers 535.43–535.86 return a process
    struct pynvml decodes into garbage or ``OverflowError`` (gpustat#161); that
    surfaces unchanged and the sampler reports the list as unreadable.
    """

    def init(self) -> None:
        pynvml.nvmlInit()

    def shutdown(self) -> None:
        pynvml.nvmlShutdown()

    def driver_version(self) -> str:
        return str(pynvml.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        return int(pynvml.nvmlSystemGetCudaDriverVersion())

    def compute_capability(self, handle: Any) -> tuple[int, int]:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        return int(major), int(minor)

    def memory_bus_width(self, handle: Any) -> int:
        return int(pynvml.nvmlDeviceGetMemoryBusWidth(handle))

    def max_memory_clock(self, handle: Any) -> int:
        return int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM))

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def device_handle(self, index: int) -> Any:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def device_name(self, handle: Any) -> str:
        return str(pynvml.nvmlDeviceGetName(handle))

    def device_uuid(self, handle: Any) -> str:
        return str(pynvml.nvmlDeviceGetUUID(handle))

    def memory_v2(self, handle: Any) -> MemoryInfo:
        # The version word must be nvmlMemory_v2 (size | 2 << 24), not a bare 2.
        return pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)

    def memory_v1(self, handle: Any) -> MemoryInfo:
        return pynvml.nvmlDeviceGetMemoryInfo(handle)

    def display_active(self, handle: Any) -> int:
        return int(pynvml.nvmlDeviceGetDisplayActive(handle))

    def compute_processes(self, handle: Any) -> list[ProcessInfo]:
        return _versioned(
            pynvml.nvmlDeviceGetComputeRunningProcesses_v3,
            pynvml.nvmlDeviceGetComputeRunningProcesses_v2,
            handle,
        )

    def graphics_processes(self, handle: Any) -> list[ProcessInfo]:
        return _versioned(
            pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3,
            pynvml.nvmlDeviceGetGraphicsRunningProcesses_v2,
            handle,
        )

    def process_name(self, pid: int) -> str:
        return str(pynvml.nvmlSystemGetProcessName(pid))


def _versioned(v3: Any, v2: Any, handle: Any) -> list[ProcessInfo]:
    """Call the ``_v3`` process list, or ``_v2`` on drivers older than 510.39.

    The unversioned pynvml wrapper would turn ``FunctionNotFound`` into
    ``NVMLLibraryMismatchError`` (not an ``NVMLError``), so the versions are called directly.
    """
    try:
        return list(v3(handle))
    except pynvml.NVMLError_FunctionNotFound:
        return list(v2(handle))
