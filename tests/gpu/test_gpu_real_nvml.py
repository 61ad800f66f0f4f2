"""The real pynvml on this machine, and the real psutil RAM numbers."""

from __future__ import annotations

import pynvml
import pytest

from homelab.gpu.cpu import cpu_memory, cpu_report
from homelab.gpu.faults import NO_DRIVER_NOTE
from homelab.gpu.nvml import RealNvml
from homelab.gpu.probe import probe


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


DRIVER = _driver_present()


@pytest.mark.skipif(DRIVER, reason="an NVIDIA driver is present on this machine")
def test_real_nvml_without_a_driver_raises_library_not_found() -> None:
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        RealNvml().init()


@pytest.mark.skipif(DRIVER, reason="an NVIDIA driver is present on this machine")
def test_probe_without_a_driver_is_the_cpu_report() -> None:
    slept: list[float] = []
    for report in (probe(sleep=slept.append), probe(backend=RealNvml(), sleep=slept.append)):
        assert report.source == "cpu" and report.devices == ()
        assert report.note == NO_DRIVER_NOTE
        assert report.cpu is not None and 0 < report.cpu.available <= report.cpu.total
    assert slept == []


@pytest.mark.skipif(not DRIVER, reason="no NVIDIA driver on this machine")
def test_probe_with_a_driver_reads_the_cards() -> None:
    report = probe(window_s=0.5, interval_s=0.25)
    assert report.source == "nvml" and report.driver
    for device in report.devices:
        assert device.total > 0 and 0 <= device.free_min <= device.free <= device.total
        assert device.samples == 3


def test_cpu_memory_is_real_and_sane() -> None:
    memory = cpu_memory()
    assert isinstance(memory.total, int) and isinstance(memory.available, int)
    assert 0 < memory.available <= memory.total
    assert memory.total >= 256 * 1024**2


def test_cpu_report_carries_note_and_warnings() -> None:
    report = cpu_report("why", ("w",))
    assert report.source == "cpu" and report.note == "why" and report.warnings == ("w",)
    assert report.cpu is not None and report.devices == ()
