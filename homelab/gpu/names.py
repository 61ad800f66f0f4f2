"""Process names: NVML first, then the operating system, else ``None``.

NVML's ``nvmlSystemGetProcessName`` fails with ``NotFound`` when the process exited
between the process list and the lookup, and with ``NoPermission`` for other users'
processes; inside a container the pid belongs to the host's namespace and may not
exist locally at all (NVIDIA/nvidia-docker#179). The OS is asked next (psutil), and a
name nobody can give is ``None``, never a guess.

When replaying a snapshot the OS answer comes from the recording (``os_name``), since
a pid from another machine means nothing here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from homelab.gpu.nvml import NVMLError
from homelab.gpu.replay import ReplayNvml

NameLookup = Callable[[int], "str | None"]


def psutil_name(pid: int) -> str | None:
    """The OS's name for ``pid``, or ``None`` if it is gone or not ours to see."""
    import psutil  # not at import: a replayed or synthetic card never asks (start-up time)

    try:
        return psutil.Process(pid).name() or None
    except (psutil.Error, OSError):
        return None


def os_name_lookup(backend: Any) -> NameLookup:
    """The OS-side lookup that fits ``backend``: the recording's, or this machine's."""
    if isinstance(backend, ReplayNvml):
        return backend.os_process_name
    return psutil_name


def resolve_name(backend: Any, pid: int, os_lookup: NameLookup) -> str | None:
    """NVML's name for ``pid``, then ``os_lookup``'s (the OS's), else ``None``."""
    try:
        name = backend.process_name(pid)
    except NVMLError:
        name = None
    return name or os_lookup(pid)
