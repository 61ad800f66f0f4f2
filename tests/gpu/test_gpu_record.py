"""record_snapshot: what it writes, and record → replay gives the same report."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from homelab.errors import GpuProbeError
from homelab.gpu.probe import probe
from homelab.gpu.record import host_info, record_snapshot, write_snapshot
from homelab.gpu.replay import ReplayNvml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
ALL = sorted(p.name for p in FIXTURES.glob("*.json") if not p.name.startswith("constructed_"))
"""Every fixture in the recorder's own shape (0.25 s samples); ``constructed_*`` ones play
slower scenarios (1 s apart) for the telemetry tests, so a 0.25 s re-recording differs."""


def raw(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def outcome(snapshot: dict[str, Any], own: frozenset[int] = frozenset()) -> Any:
    """The probe's report without its note (which names the source), or its error."""
    try:
        report = probe(backend=ReplayNvml(snapshot), own_pids=own)
    except GpuProbeError as error:
        return ("error", error.message, error.hint)
    return dataclasses.replace(report, note=None, cpu=None)


@pytest.mark.parametrize("name", ALL)
def test_record_then_replay_gives_the_same_report(name: str, tmp_path: Path) -> None:
    original = raw(name)
    recorded = record_snapshot(ReplayNvml(original), window_s=2.0, interval_s=0.25)
    path = tmp_path / "recorded.json"
    write_snapshot(recorded, path)
    again = json.loads(path.read_text())
    assert outcome(again) == outcome(original)
    assert outcome(again, frozenset({7001, 5120})) == outcome(original, frozenset({7001, 5120}))
    # ...and recording the recording changes nothing but the capture time.
    twice = record_snapshot(ReplayNvml(again), window_s=2.0, interval_s=0.25)
    assert {**twice, "captured": None} == {**again, "captured": None}


def test_recorded_schema_fields() -> None:
    recorded = record_snapshot(ReplayNvml(raw("rtx3090_wayland.json")), 2.0, 0.25)
    assert recorded["schema"] == 1 and recorded["init"] == {"error": None}
    assert recorded["system"] == {"driver": "590.44.01", "cuda_driver": 13010}
    assert recorded["captured"].endswith("Z")
    assert "comment" in recorded and recorded["host"]["os"] == "linux"
    (device,) = recorded["devices"]
    assert len(device["memory_v2"]) == len(device["memory_v1"]) == 8
    assert [e["t"] for e in device["memory_v2"]] == [k * 0.25 for k in range(8)]
    assert len(device["graphics_procs"]) == 8  # drifting: kept per sample
    assert device["compute_procs"] == [
        {"pid": 5120, "used": 1536 * 1024**2, "name": "/usr/bin/python3", "os_name": "python3"}
    ]  # constant: collapsed to one list


def test_errors_are_recorded_as_error_objects() -> None:
    data = raw("two_gpus.json")
    data["devices"][1]["handle"] = {"error": "GpuIsLost"}
    data["devices"][0]["compute_procs"] = {"error": "NoPermission"}
    data["devices"][0]["uuid"] = {"error": 999}
    data["system"]["cuda_driver"] = {"error": "FunctionNotFound"}
    recorded = record_snapshot(ReplayNvml(data), 1.0, 0.25)
    assert recorded["system"]["cuda_driver"] == {"error": "FunctionNotFound"}
    assert recorded["devices"][1] == {"index": 1, "handle": {"error": "GpuIsLost"}}
    assert recorded["devices"][0]["compute_procs"] == {"error": "NoPermission"}
    assert recorded["devices"][0]["uuid"] == {"error": "Unknown"}


def test_old_driver_records_the_v2_error_once() -> None:
    recorded = record_snapshot(ReplayNvml(raw("old_driver.json")), 1.0, 0.25)
    device = recorded["devices"][0]
    assert device["memory_v2"] == {"error": "FunctionNotFound"}
    assert len(device["memory_v1"]) == 4


def test_init_failure_is_recorded() -> None:
    recorded = record_snapshot(ReplayNvml(raw("no_gpu.json")), 1.0, 0.25)
    assert recorded["init"] == {"error": "LibraryNotFound"} and recorded["devices"] == []
    assert probe(backend=ReplayNvml(recorded)).source == "cpu"


class LiveView:
    """A replayed card presented as a live one, to drive the recorder's live path."""

    def __init__(self, snapshot: dict[str, Any]) -> None:
        self._replay = ReplayNvml(snapshot)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replay, name)


def test_live_recording_sleeps_and_stamps_time() -> None:
    slept: list[float] = []
    ticks = itertools.count(100.0, 0.3)
    recorded = record_snapshot(
        LiveView(raw("rtx3090_wayland.json")),
        1.0,
        0.25,
        sleep=slept.append,
        clock=lambda: next(ticks),
    )
    assert slept == [0.25] * 4
    device = recorded["devices"][0]
    assert [e["t"] for e in device["memory_v2"]] == [0.3, 0.6, 0.9, 1.2, 1.5]
    assert recorded["host"] == host_info()
    # Names were resolved through NVML, so no local pid lookup leaked in.
    assert {p["name"] for p in device["compute_procs"]} == {"/usr/bin/python3"}
    ReplayNvml(recorded)  # valid by the schema


def test_host_info_shape() -> None:
    info = host_info()
    assert set(info) == {"os", "wsl", "container"}
    assert isinstance(info["wsl"], bool) and isinstance(info["container"], bool)
