"""The probe's error ladder: CPU fallback, probe errors, degraded fields, lost cards."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from homelab.errors import ExitCode, GpuProbeError
from homelab.gpu.probe import probe
from homelab.gpu.replay import ReplayNvml
from homelab.units import MiB

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def raw(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def test_no_driver_falls_back_to_cpu() -> None:
    report = probe(snapshot=FIXTURES / "no_gpu.json")
    assert report.source == "cpu" and report.devices == ()
    assert report.note is not None and report.note.startswith("No NVIDIA driver found (")
    assert "planning against system RAM" in report.note
    assert report.cpu is not None and 0 < report.cpu.available <= report.cpu.total


def test_zero_devices_falls_back_to_cpu() -> None:
    data = raw("rtx3090_headless.json")
    data["devices"] = []
    report = probe(snapshot=data)  # type: ignore[arg-type]
    assert report.source == "cpu" and report.cpu is not None
    assert report.note is not None and "no GPU" in report.note


@pytest.mark.parametrize(
    ("error", "message", "hint"),
    [
        ("DriverNotLoaded", "kernel module is not loaded", "Secure Boot"),
        ("LibRmVersionMismatch", "upgraded", "Reboot"),
        ("NoPermission", "not allowed", "/dev/nvidia*"),
        ("Unknown", "could not start", "nvidia-smi"),
    ],
)
def test_unusable_driver_is_one_sentence_with_a_hint(error: str, message: str, hint: str) -> None:
    data = raw("no_gpu.json")
    data["init"] = {"error": error}
    with pytest.raises(GpuProbeError) as caught:
        probe(backend=ReplayNvml(data))
    assert message in caught.value.message and caught.value.message.count(".") >= 1
    assert caught.value.hint is not None and hint in caught.value.hint
    assert caught.value.exit_code == ExitCode.GPU_PROBE_FAILED == 5


def test_driver_not_loaded_fixture() -> None:
    with pytest.raises(GpuProbeError, match="kernel module is not loaded"):
        probe(snapshot=FIXTURES / "driver_not_loaded.json")


def test_device_count_failure_is_a_probe_error() -> None:
    data = raw("rtx3090_headless.json")
    data["device_count"] = {"error": "Unknown"}
    with pytest.raises(GpuProbeError, match="could not count the GPUs"):
        probe(backend=ReplayNvml(data))


def test_unsupported_fields_become_none_with_warnings() -> None:
    data = raw("rtx3090_headless.json")
    device = data["devices"][0]
    device["uuid"] = {"error": "NotSupported"}
    device["display_active"] = {"error": "NoPermission"}
    device["compute_procs"] = {"error": "NoPermission"}
    data["system"]["cuda_driver"] = {"error": "FunctionNotFound"}
    report = probe(backend=ReplayNvml(data))
    gpu = report.devices[0]
    assert gpu.uuid is None and gpu.display_active is None
    assert gpu.processes == ()  # graphics list still read
    assert gpu.desktop_now == 0
    assert report.cuda_driver is None and report.driver == "525.147.05"
    assert len(gpu.warnings) == 3
    assert any(w.startswith("UUID unavailable (NotSupported") for w in gpu.warnings)
    assert any(w.startswith("Display state unavailable (NoPermission") for w in gpu.warnings)
    assert any("compute process list" in w for w in gpu.warnings)
    assert report.warnings == (
        "CUDA driver version unavailable (FunctionNotFound: the driver is older than this call).",
    )


def test_both_process_lists_unreadable_means_processes_none() -> None:
    data = raw("rtx3090_wayland.json")
    data["devices"][0]["graphics_procs"] = {"error": "NotSupported"}
    data["devices"][0]["compute_procs"] = {"error": "NotSupported"}
    device = probe(backend=ReplayNvml(data)).devices[0]
    assert device.processes is None
    assert device.desktop_now is None and device.desktop_peak is None
    assert device.free_min == min(e["free"] for e in data["devices"][0]["memory_v2"])


def test_unreadable_graphics_list_makes_desktop_unknown() -> None:
    data = raw("rtx3090_wayland.json")
    data["devices"][0]["graphics_procs"] = {"error": "NoPermission"}
    device = probe(backend=ReplayNvml(data)).devices[0]
    assert device.desktop_now is None
    assert [p.pid for p in device.processes] == [5120]


@pytest.mark.parametrize("where", ["handle", "name", "memory_v2"])
@pytest.mark.parametrize("error", ["GpuIsLost", "Unknown"])
def test_lost_gpu_is_skipped_and_the_other_kept(where: str, error: str) -> None:
    data = raw("two_gpus.json")
    if where == "memory_v2":
        data["devices"][1]["memory_v2"] = {"error": error}
        data["devices"][1]["memory_v1"] = {"error": error}
    else:
        data["devices"][1][where] = {"error": error}
    report = probe(backend=ReplayNvml(data))
    assert [d.index for d in report.devices] == [0]
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith("GPU 1 skipped:") and error in report.warnings[0]
    assert report.devices[0].free_min == min(e["free"] for e in data["devices"][0]["memory_v2"])


def test_gpu_lost_in_the_middle_of_the_window_drops_it() -> None:
    data = raw("two_gpus.json")
    series = data["devices"][1]["memory_v2"]
    series[2] = {"error": "GpuIsLost"}
    report = probe(backend=ReplayNvml(data))
    assert [d.index for d in report.devices] == [0]
    assert "GpuIsLost" in report.warnings[0]


def test_every_gpu_lost_is_a_probe_error() -> None:
    data = raw("two_gpus.json")
    for device in data["devices"]:
        device["handle"] = {"error": "GpuIsLost"}
    with pytest.raises(GpuProbeError, match="No NVIDIA GPU could be read") as caught:
        probe(backend=ReplayNvml(data))
    assert "GPU 0 skipped" in caught.value.message and "GPU 1 skipped" in caught.value.message


def test_v2_unknown_retries_v1_like_wsl() -> None:
    data = raw("rtx3090_headless.json")
    device = data["devices"][0]
    v2 = device["memory_v2"]
    device["memory_v1"] = [
        {"total": e["total"], "used": e["reserved"] + e["used"], "free": e["free"]} for e in v2
    ]
    device["memory_v2"] = {"error": "Unknown"}
    gpu = probe(backend=ReplayNvml(data)).devices[0]
    assert gpu.reserved is None
    assert gpu.used == v2[-1]["reserved"] + v2[-1]["used"]
    assert gpu.free == v2[-1]["free"]
    assert any(
        w.startswith("Reserved memory (memory info v2) unavailable (Unknown") for w in gpu.warnings
    )


def test_integrated_gpu_without_own_memory_is_skipped() -> None:
    data = raw("two_gpus.json")
    data["devices"][1]["memory_v2"] = [{"total": 0, "reserved": 0, "used": 0, "free": 0}]
    report = probe(backend=ReplayNvml(data))
    assert [d.index for d in report.devices] == [0]
    assert "integrated GPU" in report.warnings[0]


def test_unresolvable_name_is_none_and_process_is_other() -> None:
    data = raw("rtx3090_headless.json")
    data["devices"][0]["graphics_procs"] = [
        {"pid": 4242, "used": 5 * MiB, "name": {"error": "NoPermission"}, "os_name": None}
    ]
    device = probe(backend=ReplayNvml(data)).devices[0]
    (process,) = device.processes
    assert process.name is None and process.klass == "other" and process.kinds == "G"
    assert device.desktop_now == 0


def test_os_name_is_used_when_nvml_cannot_name_the_process() -> None:
    data = raw("rtx3090_headless.json")
    data["devices"][0]["graphics_procs"] = [
        {"pid": 4242, "used": 5 * MiB, "name": {"error": "NotFound"}, "os_name": "Hyprland"}
    ]
    device = probe(backend=ReplayNvml(data)).devices[0]
    assert device.processes[0].name == "Hyprland"
    assert device.processes[0].klass == "desktop" and device.desktop_now == 5 * MiB


def test_probe_does_not_change_the_snapshot_dict() -> None:
    data = raw("rtx3090_wayland.json")
    before = copy.deepcopy(data)
    probe(backend=ReplayNvml(data))
    assert data == before
