"""Planning a switch: our running engine's memory counts as freed (recorded 3090 snapshot)."""

from __future__ import annotations

from pathlib import Path

from homelab.gpu.probe import probe
from homelab.gpu.report import GpuReport
from homelab.plan.budget import device_budget
from homelab.plan.own_engine import without_own_engines

SNAPSHOT = Path(__file__).parents[1] / "fixtures" / "gpu" / "rtx3090_wayland.json"


def own_engine_bytes(report: GpuReport) -> int:
    """Bytes homelab's own engines hold over all cards (0 when none runs)."""
    return sum(device.homelab_bytes for device in report.devices)


def _biggest_non_desktop(report):
    processes = [p for p in report.devices[0].processes or () if p.klass != "desktop"]
    return max(processes, key=lambda p: p.used_bytes or 0)


def test_our_engine_is_counted_as_freed() -> None:
    plain = probe(snapshot=SNAPSHOT)
    engine = _biggest_non_desktop(plain)
    assert engine.used_bytes
    ours = probe(snapshot=SNAPSHOT, own_pids=frozenset({engine.pid}))
    assert own_engine_bytes(ours) == engine.used_bytes

    freed = without_own_engines(ours)

    device = freed.devices[0]
    assert engine.pid not in {p.pid for p in device.processes or ()}
    assert device.free_min == ours.devices[0].free_min + engine.used_bytes
    before, after = device_budget(ours), device_budget(freed)
    assert after.other == before.other - engine.used_bytes
    assert after.desktop == before.desktop
    assert own_engine_bytes(freed) == 0


def test_a_report_without_our_engine_is_unchanged() -> None:
    plain = probe(snapshot=SNAPSHOT)
    assert without_own_engines(plain) is plain
