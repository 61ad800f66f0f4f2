"""Process classification, C+G merging and the desktop sum."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from homelab.gpu.classify import classify, desktop_bytes, executable, is_desktop, merge_processes
from homelab.gpu.report import GpuProcess

MiB = 1024**2


def entry(pid: int, used: int | None) -> SimpleNamespace:
    """Same attribute bag pynvml's nvmlStructToFriendlyObject returns."""
    return SimpleNamespace(pid=pid, usedGpuMemory=used)


@pytest.mark.parametrize(
    ("name", "exe"),
    [
        ("/usr/lib/xorg/Xorg", "xorg"),
        ("Xwayland", "xwayland"),
        ("C:\\Windows\\System32\\dwm.exe", "dwm"),
        ("/opt/google/chrome/chrome --type=gpu-process --foo", "chrome"),
        ("  /usr/bin/kwin_wayland  ", "kwin_wayland"),
        ("", ""),
    ],
)
def test_executable(name: str, exe: str) -> None:
    assert executable(name) == exe


@pytest.mark.parametrize(
    "name",
    [
        "Xorg",
        "/usr/lib/Xorg",
        "Xwayland",
        "gnome-shell",
        "mutter",
        "kwin_wayland",
        "kwin_x11",
        "plasmashell",
        "Hyprland",
        "sway",
        "wayfire",
        "weston",
        "cosmic-comp",
        "niri",
        "picom",
        "firefox",
        "/usr/lib/firefox/firefox-bin",
        "firefox-esr",
        "chrome",
        "chromium",
        "chromium-browser",
        "brave",
        "brave-browser",
        "msedge",
        "electron",
        "electron33",
        "/opt/vscode/code --type=gpu-process",
        "/usr/bin/slack --type=gpu-process",
        "C:\\Program Files\\Mozilla Firefox\\firefox.exe",
        "DWM.EXE",
    ],
)
def test_desktop_names(name: str) -> None:
    assert is_desktop(name)


@pytest.mark.parametrize(
    "name", [None, "", "python3", "/usr/bin/llama-server", "ollama", "blender", "vllm", "xterm"]
)
def test_not_desktop_names(name: str | None) -> None:
    assert not is_desktop(name)


def test_class_priority() -> None:
    own = frozenset({10})
    assert classify(10, "Xorg", "G", own) == "homelab"
    assert classify(11, "Xorg", "C+G", own) == "desktop"
    assert classify(12, "python3", "C", own) == "compute"
    assert classify(13, "python3", "C+G", own) == "compute"
    assert classify(14, "konsole", "G", own) == "other"
    assert classify(15, None, "G", own) == "other"
    assert classify(16, None, "C", own) == "compute"


def test_same_pid_in_both_lists_is_one_c_plus_g_row() -> None:
    names = {1: "Xorg", 2: "obs", 3: "python3"}.get
    result = merge_processes(
        compute=[entry(2, 300 * MiB), entry(3, 2048 * MiB)],
        graphics=[entry(1, 400 * MiB), entry(2, 300 * MiB)],
        name_of=names,
    )
    assert result is not None
    assert [(p.pid, p.kinds, p.klass, p.used_bytes) for p in result] == [
        (1, "G", "desktop", 400 * MiB),
        (2, "C+G", "compute", 300 * MiB),
        (3, "C", "compute", 2048 * MiB),
    ]
    assert sum(p.used_bytes or 0 for p in result) == 2748 * MiB


@pytest.mark.parametrize(
    ("g", "c", "used"),
    [(100, 120, 120), (None, 50, 50), (70, None, 70), (None, None, None)],
)
def test_c_plus_g_memory_is_the_larger_reading(
    g: int | None, c: int | None, used: int | None
) -> None:
    result = merge_processes([entry(5, c)], [entry(5, g)], name_of=lambda pid: None)
    assert result is not None
    assert [(p.kinds, p.used_bytes) for p in result] == [("C+G", used)]


def test_duplicate_pid_within_one_list_stays_one_kind() -> None:
    result = merge_processes([entry(5, 10), entry(5, 20)], None, name_of=lambda pid: None)
    assert result is not None
    assert [(p.kinds, p.used_bytes) for p in result] == [("C", 20)]


def test_unreadable_lists() -> None:
    assert merge_processes(None, None, name_of=lambda pid: None) is None
    only_graphics = merge_processes(None, [entry(1, MiB)], name_of=lambda pid: "sway")
    assert only_graphics is not None and only_graphics[0].kinds == "G"
    assert merge_processes([], [], name_of=lambda pid: None) == ()


def _process(klass: str, used: int | None) -> GpuProcess:
    return GpuProcess(pid=1, name=None, used_bytes=used, kinds="G", klass=klass)  # type: ignore[arg-type]


def test_desktop_bytes() -> None:
    procs = [_process("desktop", 100), _process("desktop", 50), _process("compute", 1000)]
    assert desktop_bytes(procs, graphics_known=True) == 150
    assert desktop_bytes(procs, graphics_known=False) is None
    assert desktop_bytes([_process("desktop", None), _process("desktop", 5)], True) is None
    assert desktop_bytes([_process("other", None)], True) == 0
    assert desktop_bytes((), True) == 0
    assert desktop_bytes(None, True) is None
