"""ReplayNvml answers like NVML: real pynvml exceptions, series, None, and clear schema errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from homelab.errors import GpuProbeError
from homelab.gpu.nvml import NvmlBackend, RealNvml, error_name, is_error_name, make_error
from homelab.gpu.replay import ReplayNvml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def raw(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def started(data: dict[str, Any]) -> ReplayNvml:
    backend = ReplayNvml(data)
    backend.init()
    return backend


def test_both_backends_satisfy_the_protocol() -> None:
    assert isinstance(RealNvml(), NvmlBackend)
    assert isinstance(ReplayNvml(raw("rtx3090_headless.json")), NvmlBackend)


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("LibraryNotFound", pynvml.NVMLError_LibraryNotFound),
        ("DriverNotLoaded", pynvml.NVMLError_DriverNotLoaded),
        ("LibRmVersionMismatch", pynvml.NVMLError_LibRmVersionMismatch),
        ("GpuIsLost", pynvml.NVMLError_GpuIsLost),
    ],
)
def test_init_error_raises_the_real_pynvml_class(name: str, cls: type) -> None:
    data = raw("no_gpu.json")
    data["init"] = {"error": name}
    with pytest.raises(cls) as caught:
        ReplayNvml(data).init()
    assert caught.value.value == pynvml.NVMLError(caught.value.value).value
    assert type(caught.value) is type(pynvml.NVMLError(caught.value.value))
    assert error_name(caught.value) == name


def test_numeric_error_codes_map_to_the_same_class() -> None:
    data = raw("rtx3090_headless.json")
    data["devices"][0]["uuid"] = {"error": 15}
    backend = started(data)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        backend.device_uuid(backend.device_handle(0))


def test_calls_before_init_raise_uninitialized_like_nvml() -> None:
    backend = ReplayNvml(raw("rtx3090_headless.json"))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        backend.device_count()
    backend.init()
    assert backend.device_count() == 1
    backend.shutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        backend.driver_version()


def test_memory_series_is_consumed_one_per_call_and_holds_the_last() -> None:
    data = raw("rtx3090_wayland.json")
    series = data["devices"][0]["memory_v2"]
    backend = started(data)
    handle = backend.device_handle(0)
    seen = [backend.memory_v2(handle).free for _ in range(len(series) + 3)]
    assert seen == [e["free"] for e in series] + [series[-1]["free"]] * 3
    info = backend.memory_v2(handle)
    assert (info.total, info.reserved, info.used) == (
        series[-1]["total"],
        series[-1]["reserved"],
        series[-1]["used"],
    )


def test_process_series_follows_the_memory_sample() -> None:
    data = raw("rtx3090_wayland.json")
    graphics = data["devices"][0]["graphics_procs"]
    backend = started(data)
    handle = backend.device_handle(0)
    backend.memory_v2(handle)
    first = {p.pid: p.usedGpuMemory for p in backend.graphics_processes(handle)}
    assert first == {p["pid"]: p["used"] for p in graphics[0]}
    for _ in range(4):
        backend.memory_v2(handle)
    fifth = {p.pid: p.usedGpuMemory for p in backend.graphics_processes(handle)}
    assert fifth == {p["pid"]: p["used"] for p in graphics[4]}
    assert first != fifth


def test_v1_is_derived_from_v2_when_not_recorded() -> None:
    data = raw("rtx3090_headless.json")
    entry = data["devices"][0]["memory_v2"][0]
    backend = started(data)
    info = backend.memory_v1(backend.device_handle(0))
    assert info.used == entry["reserved"] + entry["used"]
    assert (info.total, info.free) == (entry["total"], entry["free"])
    assert not hasattr(info, "reserved")


def test_used_null_is_none() -> None:
    backend = started(raw("per_process_unavailable.json"))
    handle = backend.device_handle(0)
    procs = backend.graphics_processes(handle) + backend.compute_processes(handle)
    assert procs and all(p.usedGpuMemory is None for p in procs)


def test_field_errors_raise_real_classes() -> None:
    backend = started(raw("old_driver.json"))
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        backend.memory_v2(backend.device_handle(0))
    with pytest.raises(pynvml.NVMLError_NotFound):
        backend.process_name(999_999)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        backend.device_handle(5)


def test_process_name_and_recorded_os_name() -> None:
    backend = started(raw("rtx3090_wayland.json"))
    assert backend.process_name(1873) == "/usr/bin/kwin_wayland"
    assert backend.os_process_name(1873) == "kwin_wayland"
    assert backend.os_process_name(424242) is None


def test_sample_count_and_window_follow_the_recording() -> None:
    assert ReplayNvml(raw("rtx3090_wayland.json")).sample_count == 8
    assert ReplayNvml(raw("rtx3090_wayland.json")).window_s == 1.75
    assert ReplayNvml(raw("old_driver.json")).sample_count == 4
    assert ReplayNvml(raw("no_gpu.json")).sample_count == 1


def test_make_error_and_names() -> None:
    assert isinstance(make_error("NotSupported"), pynvml.NVMLError_NotSupported)
    assert isinstance(make_error(9), pynvml.NVMLError_DriverNotLoaded)
    assert is_error_name("Unknown") and not is_error_name("NoSuchThing")
    assert not is_error_name(True) and not is_error_name(None)
    with pytest.raises(ValueError, match="not an NVML error name"):
        make_error("Nope")


# -- malformed snapshots -------------------------------------------------------------------


def _break(mutate: Any) -> dict[str, Any]:
    data = raw("rtx3090_wayland.json")
    mutate(data)
    return data


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(schema=2), "schema"),
        (lambda d: d.update(init={"error": "NotAnError"}), "init.error"),
        (lambda d: d.pop("system"), "system"),
        (lambda d: d["system"].update(cuda_driver="13.1"), "system.cuda_driver"),
        (lambda d: d.update(devices={}), "devices"),
        (lambda d: d["devices"][0].update(index=3), "devices[0].index"),
        (lambda d: d["devices"][0].pop("name"), "devices[0].name"),
        (lambda d: d["devices"][0].update(memory_v2=[]), "devices[0].memory_v2"),
        (
            lambda d: d["devices"][0]["memory_v2"][2].update(free="lots"),
            "devices[0].memory_v2[2].free",
        ),
        (
            lambda d: d["devices"][0]["memory_v2"][1].pop("reserved"),
            "devices[0].memory_v2[1].reserved",
        ),
        (
            lambda d: d["devices"][0]["memory_v2"][0].update(free=10**12),
            "devices[0].memory_v2[0].free",
        ),
        (
            lambda d: d["devices"][0].update(display_active={"error": "Nope"}),
            "devices[0].display_active.error",
        ),
        (
            lambda d: d["devices"][0]["graphics_procs"][3][1].pop("used"),
            "devices[0].graphics_procs[3][1].used",
        ),
        (
            lambda d: d["devices"][0]["compute_procs"][0].update(pid=-4),
            "devices[0].compute_procs[0].pid",
        ),
        (lambda d: d["devices"][0].update(compute_procs="none"), "devices[0].compute_procs"),
        (
            lambda d: d["devices"][0]["graphics_procs"].append({"pid": 1, "used": 0}),
            "devices[0].graphics_procs",
        ),
    ],
)
def test_malformed_snapshot_names_the_field(mutate: Any, field: str) -> None:
    with pytest.raises(GpuProbeError) as caught:
        ReplayNvml(_break(mutate))
    assert caught.value.message.startswith(f"GPU snapshot: {field} ")
    assert caught.value.message.endswith(".")
    assert caught.value.hint is not None and "--record" in caught.value.hint


def test_v1_required_when_v2_is_an_error() -> None:
    data = raw("old_driver.json")
    data["devices"][0].pop("memory_v1")
    with pytest.raises(GpuProbeError, match=r"devices\[0\]\.memory_v1 is missing"):
        ReplayNvml(data)


def test_malformed_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "card.json"
    path.write_text('{"schema": 1, "devices": [')
    with pytest.raises(GpuProbeError) as caught:
        ReplayNvml(path)
    assert str(path) in caught.value.message and "not valid JSON" in caught.value.message
    data = raw("two_gpus.json")
    data["devices"][1]["memory_v2"][0]["total"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(GpuProbeError, match=rf"{path.name}: devices\[1\]\.memory_v2\[0\]\.total"):
        ReplayNvml(path)


def test_missing_file_is_a_probe_error(tmp_path: Path) -> None:
    with pytest.raises(GpuProbeError, match="Cannot read GPU snapshot .*nope.json"):
        ReplayNvml(tmp_path / "nope.json")


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.name)
def test_every_fixture_is_valid_and_says_what_it_is(path: Path) -> None:
    backend = ReplayNvml(path)
    comment = backend.data["comment"]
    assert comment.startswith("Scenario:") and len(comment) > 80
