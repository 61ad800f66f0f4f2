"""Sort the processes on a card into desktop / homelab / compute / other.

The desktop share is what moves under a planner's feet: compositors and X servers
grow their buffer pools on window resizes (NVIDIA/egl-wayland#126), browsers'
GPU processes grow with tabs and video. Names follow research nvml.md §3.4.

A pid can be in both NVML lists (nvidia-smi's ``C+G``): it becomes one row, its memory
counted once.
"""

from __future__ import annotations

import ntpath
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from homelab.gpu.report import GpuProcess, ProcessClass

COMPOSITORS = frozenset(
    {
        "xorg",
        "x",
        "xorg.bin",
        "xwayland",
        "gnome-shell",
        "mutter",
        "kwin_wayland",
        "kwin_wayland_wrapper",
        "kwin_x11",
        "kwin",
        "plasmashell",
        "hyprland",
        "sway",
        "wayfire",
        "weston",
        "cosmic-comp",
        "niri",
        "picom",
        "compton",
        "gamescope",
        "labwc",
        "river",
        "xfwm4",
        "marco",
        "muffin",
        "cinnamon",
        "budgie-wm",
        "dwm",
        "explorer",
    }
)
"""Display servers, compositors and desktop shells, Windows' ``dwm``/``explorer`` included
(lower case, no ``.exe``)."""

BROWSERS = frozenset(
    {
        "firefox",
        "firefox-bin",
        "firefox-esr",
        "librewolf",
        "chrome",
        "google-chrome",
        "chromium",
        "chromium-browser",
        "brave",
        "brave-browser",
        "msedge",
        "microsoft-edge",
        "opera",
        "vivaldi-bin",
        "electron",
        "code",
        "discord",
        "slack",
        "spotify",
        "steamwebhelper",
        "teams",
        "obsidian",
    }
)
"""Browsers and Chromium/Electron apps whose GPU process holds VRAM."""

_BROWSER_PREFIXES = ("firefox", "chrom", "brave", "msedge", "electron")
_GPU_PROCESS_FLAG = "--type=gpu-process"


def executable(name: str) -> str:
    """The bare, lower-case program name.

    ``"/usr/lib/xorg/Xorg"`` → ``"xorg"``, ``"C:\\Windows\\System32\\dwm.exe"`` → ``"dwm"``,
    ``"chrome --type=gpu-process"`` → ``"chrome"``.
    """
    text = name.strip()
    first = text.split()[0] if text else text
    # ntpath.basename splits on both "/" and "\\".
    base = ntpath.basename(first) or first
    base = base.lower()
    return base[:-4] if base.endswith(".exe") else base


def is_desktop(name: str | None) -> bool:
    """True for a compositor, X server, shell or browser GPU process."""
    if not name:
        return False
    if _GPU_PROCESS_FLAG in name:
        return True
    exe = executable(name)
    # Names with spaces in their path ("C:\\Program Files\\Mozilla Firefox\\firefox.exe").
    whole = ntpath.basename(name.strip()).lower().removesuffix(".exe")
    return any(
        n in COMPOSITORS or n in BROWSERS or n.startswith(_BROWSER_PREFIXES) for n in (exe, whole)
    )


def classify(pid: int, name: str | None, kinds: str, own_pids: frozenset[int]) -> ProcessClass:
    """homelab (one of ours) > desktop (by name) > compute (in the compute list) > other."""
    if pid in own_pids:
        return "homelab"
    if is_desktop(name):
        return "desktop"
    if "C" in kinds:
        return "compute"
    return "other"


def merge_processes(
    compute: Sequence[Any] | None,
    graphics: Sequence[Any] | None,
    name_of: Callable[[int], str | None],
    own_pids: frozenset[int] = frozenset(),
) -> tuple[GpuProcess, ...] | None:
    """One :class:`GpuProcess` per pid from NVML's two lists (``None``: unreadable).

    A pid in both lists is ``"C+G"``; its memory is the larger of the two readings (NVML
    reports the process's one total in each list), ``None`` only if both are ``None``.
    Returns ``None`` when neither list could be read. Order: graphics first (as
    nvidia-smi), then compute-only, each by pid.
    """
    if compute is None and graphics is None:
        return None
    kinds: dict[int, str] = {}
    used: dict[int, int | None] = {}
    for label, entries in (("G", graphics or ()), ("C", compute or ())):
        for entry in entries:
            pid = int(entry.pid)
            value = entry.usedGpuMemory
            if pid in kinds:
                if label not in kinds[pid]:
                    kinds[pid] = "C+G"
                used[pid] = _larger(used[pid], value)
            else:
                kinds[pid] = label
                used[pid] = None if value is None else int(value)
    order = sorted(kinds, key=lambda pid: (kinds[pid] == "C", pid))
    result = []
    for pid in order:
        name = name_of(pid)
        result.append(
            GpuProcess(
                pid=pid,
                name=name,
                used_bytes=used[pid],
                kinds=kinds[pid],
                klass=classify(pid, name, kinds[pid], own_pids),
            )
        )
    return tuple(result)


def desktop_bytes(processes: Iterable[GpuProcess] | None, graphics_known: bool) -> int | None:
    """Memory of the desktop processes; ``None`` if the graphics list was unreadable or
    a desktop process's memory is not available (WDDM/WSL). ``0`` means known empty."""
    if processes is None or not graphics_known:
        return None
    total = 0
    for process in processes:
        if process.klass != "desktop":
            continue
        if process.used_bytes is None:
            return None
        total += process.used_bytes
    return total


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None:
        return None if b is None else int(b)
    return a if b is None else max(a, int(b))
