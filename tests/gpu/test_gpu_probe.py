"""Every fixture through probe(): the numbers are derived here from the fixture's raw values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from homelab.errors import UsageError
from homelab.gpu.probe import probe, sample_count
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.report import synthetic_report
from homelab.units import GiB, MiB

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def raw(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def memory_entries(device: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The memory samples the probe should use, and whether they are v2."""
    v2 = device["memory_v2"]
    if isinstance(v2, dict) and "error" in v2:
        return list(device["memory_v1"]), False
    return list(v2), True


def procs_at(device: dict[str, Any], key: str, k: int) -> list[dict[str, Any]]:
    value = device[key]
    if value and isinstance(value[0], list):
        return value[min(k, len(value) - 1)]
    return value


def expected(device: dict[str, Any], classes: dict[int, str]) -> dict[str, Any]:
    """What the probe must report for one raw device, computed from its raw values."""
    entries, is_v2 = memory_entries(device)
    n = len(entries)
    desktop = []
    for k in range(n):
        graphics = procs_at(device, "graphics_procs", k)
        compute = procs_at(device, "compute_procs", k)
        seen: dict[int, int | None] = {}
        for p in graphics + compute:
            seen[p["pid"]] = p["used"]  # a C+G pid counts once
        values = [seen[pid] for pid in seen if classes[pid] == "desktop"]
        desktop.append(None if None in values else sum(values))
    last = entries[-1]
    known = [d for d in desktop if d is not None]
    g_last = {p["pid"]: p for p in procs_at(device, "graphics_procs", n - 1)}
    c_last = {p["pid"]: p for p in procs_at(device, "compute_procs", n - 1)}
    processes = {}
    for pid in set(g_last) | set(c_last):
        kinds = "C+G" if pid in g_last and pid in c_last else ("G" if pid in g_last else "C")
        entry = g_last.get(pid) or c_last[pid]
        processes[pid] = (entry["name"], entry["used"], kinds, classes[pid])
    return {
        "total": last["total"],
        "reserved": last["reserved"] if is_v2 else None,
        "used": last["used"],
        "free": last["free"],
        "free_min": min(e["free"] for e in entries),
        "desktop_now": desktop[-1],
        "desktop_peak": max(known) if known else None,
        "display_active": bool(device["display_active"]),
        "samples": n,
        "processes": processes,
    }


def observed(device: Any) -> dict[str, Any]:
    return {
        "total": device.total,
        "reserved": device.reserved,
        "used": device.used,
        "free": device.free,
        "free_min": device.free_min,
        "desktop_now": device.desktop_now,
        "desktop_peak": device.desktop_peak,
        "display_active": device.display_active,
        "samples": device.samples,
        "processes": {p.pid: (p.name, p.used_bytes, p.kinds, p.klass) for p in device.processes},
    }


CLASSES = {
    "rtx3090_wayland.json": {
        1873: "desktop",
        1921: "desktop",
        2050: "desktop",
        2311: "other",
        3412: "desktop",
        5120: "compute",
    },
    "rtx4060ti16_xorg.json": {1342: "desktop", 1690: "desktop", 4102: "desktop", 5230: "compute"},
    "rtx3090_headless.json": {},
    "two_gpus.json": {1280: "desktop", 1655: "desktop", 2890: "desktop", 7001: "compute"},
    "per_process_unavailable.json": {
        1184: "desktop",
        6020: "desktop",
        9312: "desktop",
        10448: "compute",
    },
    "old_driver.json": {1107: "desktop", 1502: "desktop"},
}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_fixture_reports_exactly_what_its_raw_values_say(name: str) -> None:
    data = raw(name)
    report = probe(snapshot=FIXTURES / name)
    assert report.source == "replay"
    assert report.driver == data["system"]["driver"]
    cuda = data["system"]["cuda_driver"]
    assert report.cuda_driver == f"{cuda // 1000}.{cuda % 1000 // 10}"
    assert report.cpu is None and report.warnings == ()
    assert [d.index for d in report.devices] == [d["index"] for d in data["devices"]]
    for device, raw_device in zip(report.devices, data["devices"], strict=True):
        assert device.name == raw_device["name"]
        assert device.uuid == raw_device["uuid"]
        assert observed(device) == expected(raw_device, CLASSES[name])


def test_wayland_worst_case_is_not_the_last_sample() -> None:
    """free_min and desktop_peak come from the middle of the window, not its end."""
    device = probe(snapshot=FIXTURES / "rtx3090_wayland.json").devices[0]
    raw_device = raw("rtx3090_wayland.json")["devices"][0]
    frees = [e["free"] for e in raw_device["memory_v2"]]
    assert device.free_min == min(frees) < frees[-1] == device.free
    assert device.desktop_peak is not None and device.desktop_now is not None
    assert device.desktop_peak > device.desktop_now
    assert (
        device.desktop_peak
        - min(sum(p["used"] for p in s if p["pid"] != 2311) for s in raw_device["graphics_procs"])
        > GiB // 2 - 20 * MiB
    )  # the ~0.5 GiB drift the scenario describes
    assert device.samples == len(raw_device["memory_v2"]) == 8


def test_c_plus_g_process_is_one_row_counted_once() -> None:
    report = probe(snapshot=FIXTURES / "rtx4060ti16_xorg.json")
    rows = [p for p in report.devices[0].processes if p.pid == 5230]
    assert len(rows) == 1
    assert rows[0].kinds == "C+G" and rows[0].klass == "compute"
    assert rows[0].used_bytes == 310 * MiB


def test_unavailable_process_memory_is_none_and_desktop_unknown() -> None:
    device = probe(snapshot=FIXTURES / "per_process_unavailable.json").devices[0]
    assert device.processes and all(p.used_bytes is None for p in device.processes)
    assert device.desktop_now is None and device.desktop_peak is None
    assert device.free_min > 0  # device-level numbers stay valid


def test_old_driver_falls_back_to_v1_with_reserved_unknown() -> None:
    device = probe(snapshot=FIXTURES / "old_driver.json").devices[0]
    assert device.reserved is None
    assert any("FunctionNotFound" in w and "reservation" in w for w in device.warnings)
    assert device.used == raw("old_driver.json")["devices"][0]["memory_v1"][-1]["used"]


def test_own_pids_are_classed_homelab() -> None:
    report = probe(snapshot=FIXTURES / "two_gpus.json", own_pids=frozenset({7001}))
    gpu1 = report.devices[1]
    assert [p.klass for p in gpu1.processes] == ["homelab"]
    assert gpu1.homelab_bytes == 9216 * MiB
    assert report.devices[0].homelab_bytes == 0


def test_headless_card_has_known_zero_desktop() -> None:
    device = probe(snapshot=FIXTURES / "rtx3090_headless.json").devices[0]
    assert device.processes == ()
    assert device.desktop_now == 0 and device.desktop_peak == 0
    assert device.display_active is False


def test_replay_never_sleeps_whatever_the_window() -> None:
    calls: list[float] = []
    report = probe(snapshot=FIXTURES / "rtx3090_wayland.json", window_s=30, sleep=calls.append)
    assert calls == []
    assert report.devices[0].samples == 8
    assert report.window_s == 1.75


class LiveView:
    """A replayed card presented as a live one (not a ReplayNvml), to drive the
    probe's live path: window-sized sampling and sleeping between samples."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self._replay = ReplayNvml(snapshot)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replay, name)


def test_live_window_takes_interval_samples_and_sleeps_between() -> None:
    calls: list[float] = []
    backend = LiveView(raw("rtx3090_wayland.json"))
    report = probe(backend=backend, window_s=1.0, interval_s=0.25, sleep=calls.append)
    assert report.source == "nvml" and report.note is None
    assert calls == [0.25] * 4
    device = report.devices[0]
    frees = [e["free"] for e in raw("rtx3090_wayland.json")["devices"][0]["memory_v2"]]
    assert device.samples == 5
    assert device.free == frees[4] and device.free_min == min(frees[:5])
    assert report.window_s == 1.0


@pytest.mark.parametrize(
    ("window", "interval", "count"),
    [(2.0, 0.25, 9), (0.0, 0.25, 1), (1.0, 0.3, 4), (0.2, 0.25, 1), (1.0, 0.0, 1)],
)
def test_sample_count(window: float, interval: float, count: int) -> None:
    assert sample_count(window, interval) == count


# -- synthetic ------------------------------------------------------------------------------


def test_synthetic_report_is_an_empty_card_of_that_size() -> None:
    report = synthetic_report(16 * GiB)
    assert report.source == "synthetic" and report.cpu is None
    (device,) = report.devices
    assert device.total == device.free == device.free_min == 16 * GiB
    assert device.reserved == 0 and device.used == 0
    assert device.display_active is False
    assert device.desktop_now == 0 and device.desktop_peak == 0
    assert device.processes == () and device.homelab_bytes == 0
    assert "16.00 GiB" in device.name


@pytest.mark.parametrize("size", [0, -1])
def test_synthetic_report_refuses_non_positive_sizes(size: int) -> None:
    with pytest.raises(UsageError, match="positive size"):
        synthetic_report(size)


def test_a_live_window_samples_system_ram_with_the_card_and_keeps_its_lowest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RAM moves with the desktop as the card does: every live sample reads it, the report
    keeps the moment with the least available; an unreadable reading is skipped."""
    from homelab.gpu import cpu
    from homelab.gpu.report import CpuMemory

    readings = iter([10, 7, None, 9, 8])

    def now() -> CpuMemory | None:
        value = next(readings)
        return None if value is None else CpuMemory(total=32 * GiB, available=value * GiB)

    monkeypatch.setattr(cpu, "ram_now", now)
    report = probe(
        backend=LiveView(raw("rtx3090_wayland.json")),
        window_s=1.0,
        interval_s=0.25,
        sleep=lambda _: None,
    )
    assert report.ram_low == CpuMemory(total=32 * GiB, available=7 * GiB)


def test_a_replayed_card_holds_no_ram_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    from homelab.gpu import cpu

    monkeypatch.setattr(cpu, "ram_now", lambda: pytest.fail("a recording has no RAM to read"))
    assert probe(snapshot=FIXTURES / "rtx3090_wayland.json").ram_low is None
