"""The real pynvml on this machine, and the real psutil RAM numbers."""

from __future__ import annotations

import queue

import pynvml
import pytest

from homelab.gpu.cpu import cpu_memory, cpu_report
from homelab.gpu.faults import NO_DRIVER_NOTE
from homelab.gpu.nvml import RealNvml
from homelab.gpu.probe import probe
from homelab.gpu.telemetry import GpuSample, TelemetryPoller
from tests.factory.clock import ManualClock


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


class CountingNvml(RealNvml):
    """The real driver, counting how often NVML is opened and closed."""

    def __init__(self) -> None:
        self.inits = self.shutdowns = 0

    def init(self) -> None:
        super().init()
        self.inits += 1

    def shutdown(self) -> None:
        super().shutdown()
        self.shutdowns += 1


def _three_samples(poller: TelemetryPoller, clock: ManualClock) -> list[GpuSample]:
    got: queue.Queue[GpuSample] = queue.Queue()
    poller.subscribe(got.put)
    samples = [poller.start()]
    assert got.get(timeout=30) is samples[0]  # subscribers get sample 0 too
    for _ in range(2):
        clock.advance(poller.interval_s)
        samples.append(got.get(timeout=30))
    return samples


@pytest.mark.skipif(DRIVER, reason="an NVIDIA driver is present on this machine")
def test_telemetry_without_a_driver_samples_system_ram() -> None:
    clock = ManualClock()
    poller = TelemetryPoller(backend=CountingNvml(), interval_s=1.0, clock=clock)
    try:
        samples = _three_samples(poller, clock)
    finally:
        poller.stop()
    assert [s.seq for s in samples] == [0, 1, 2] and not any(s.final for s in samples)
    assert all(s.report.source == "cpu" and s.report.note == NO_DRIVER_NOTE for s in samples)
    assert [s.at for s in samples] == [0.0, 1.0, 2.0]


@pytest.mark.skipif(not DRIVER, reason="no NVIDIA driver on this machine")
def test_telemetry_opens_the_real_driver_once() -> None:
    clock = ManualClock()
    backend = CountingNvml()
    poller = TelemetryPoller(backend=backend, interval_s=1.0, window_s=60.0, clock=clock)
    try:
        samples = _three_samples(poller, clock)
        assert (backend.inits, backend.shutdowns) == (1, 0)
    finally:
        poller.stop()
    assert (backend.inits, backend.shutdowns) == (1, 1)
    assert all(s.report.source == "nvml" and s.report.devices for s in samples)
    for sample in samples:
        for device, lowest in zip(sample.report.devices, sample.lowest_free, strict=True):
            assert 0 <= lowest <= device.free_min <= device.free <= device.total
    assert [s.report.devices[0].samples for s in samples] == [1, 2, 3]
