"""The GPU telemetry poller over the recorded snapshots, its clock driven by the test.

Each recording is played through :class:`TelemetryPoller` on a :class:`ManualClock`: the
test moves the clock to each recorded ``t`` and takes the sample the poller published.
Every window the poller reports is checked against the one-shot ``probe()`` run on a
copy of the recording cut to that window's samples (same fields, same numbers), so the
sliding window is the probe's worst case over the same moments.
"""

from __future__ import annotations

import copy
import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from homelab.errors import GpuProbeError
from homelab.gpu.probe import probe
from homelab.gpu.replay import ReplayNvml
from homelab.gpu.telemetry import GpuSample, TelemetryPoller
from tests.factory.clock import ManualClock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
WAIT_S = 30.0  # a bound for a loaded machine, never an expectation
RECORDED = sorted(
    p.name for p in FIXTURES.glob("*.json") if json.loads(p.read_text())["init"]["error"] is None
)


def raw(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def recorded_times(data: dict[str, Any]) -> list[float]:
    backend = ReplayNvml(data)
    return [t or 0.0 for t in backend.sample_times]


def cut(data: dict[str, Any], lo: int, hi: int) -> dict[str, Any]:
    """The recording with only samples ``lo..hi`` (inclusive) of every per-sample series."""
    out = copy.deepcopy(data)
    for device in out.get("devices", []):
        for key in ("memory_v2", "memory_v1", "graphics_procs", "compute_procs"):
            series = device.get(key)
            per_sample = key.startswith("memory") or (
                isinstance(series, list) and series and all(isinstance(s, list) for s in series)
            )
            if isinstance(series, list) and per_sample:
                last = len(series) - 1
                device[key] = series[min(lo, last) : min(hi, last) + 1]
    return out


_MADE: list[TelemetryPoller] = []


@pytest.fixture(autouse=True)
def _stop_pollers() -> Iterator[None]:
    yield
    while _MADE:
        _MADE.pop().stop()


class Played:
    """A poller on a manual clock and the samples it published, in order (stopped after
    the test)."""

    def __init__(self, data: dict[str, Any], window_s: float = 60.0) -> None:
        self.clock = ManualClock()
        self.poller = TelemetryPoller(snapshot=data, window_s=window_s, clock=self.clock)
        self.samples: queue.Queue[GpuSample] = queue.Queue()
        self.subscription = self.poller.subscribe(self.samples.put, queue_size=10_000)
        _MADE.append(self.poller)

    def next(self) -> GpuSample:
        return self.samples.get(timeout=WAIT_S)

    def play(self) -> list[GpuSample]:
        """Start, then move the clock to each recorded time and take that sample."""
        first = self.poller.start()
        got = [self.next()]
        assert got[0] is first
        times = recorded_times(self.poller.backend.data)
        for k in range(1, len(times)):
            self.clock.advance(times[k] - self.clock.now())
            got.append(self.next())
        return got


@pytest.mark.parametrize("name", RECORDED)
def test_each_window_is_the_probe_over_the_same_samples(name: str) -> None:
    data = raw(name)
    times = recorded_times(data)
    window_s = 0.5
    played = Played(data, window_s=window_s)
    samples = played.play()
    played.poller.stop()
    assert [s.seq for s in samples] == list(range(len(times)))
    assert [s.at for s in samples] == [t - times[0] for t in times]
    assert [s.final for s in samples] == [False] * (len(times) - 1) + [True]
    for k, sample in enumerate(samples):
        lo = min(i for i, t in enumerate(times) if t >= times[k] - window_s)
        expected = probe(snapshot=cut(data, lo, k))  # type: ignore[arg-type]
        assert sample.report.devices == expected.devices, (name, k)
        assert sample.report.warnings == expected.warnings
        assert sample.report.window_s == pytest.approx(times[k] - times[lo])
        whole = probe(snapshot=cut(data, 0, k))  # type: ignore[arg-type]
        assert sample.lowest_free == tuple(d.free_min for d in whole.devices)


def test_nvml_is_initialised_once_for_the_poller_life() -> None:
    played = Played(raw("rtx3090_wayland.json"))
    backend = played.poller.backend
    assert isinstance(backend, ReplayNvml)
    samples = played.play()
    assert len(samples) == 8
    assert (backend.init_calls, backend.shutdown_calls) == (1, 0)
    played.poller.stop()
    assert (backend.init_calls, backend.shutdown_calls) == (1, 1)
    assert played.poller.ended
    assert not any(t.name == "homelab-gpu-telemetry" for t in threading.enumerate())
    # the one-shot probe, for contrast, opens and closes NVML on every call
    again = ReplayNvml(raw("rtx3090_wayland.json"))
    for _ in range(3):
        probe(backend=again)
    assert (again.init_calls, again.shutdown_calls) == (3, 3)


def test_the_desktop_peak_slides_out_of_a_short_window() -> None:
    data = raw("rtx3090_wayland.json")
    samples = Played(data, window_s=0.25).play()
    peaks = [s.report.devices[0].desktop_peak for s in samples]
    nows = [s.report.devices[0].desktop_now for s in samples]
    # two samples per window: the peak is the larger of this one and the one before
    assert peaks == [nows[0], *(max(a, b) for a, b in zip(nows, nows[1:], strict=False))]
    # the tab closed at the last sample: a window of one sample drops the peak, a long one
    # keeps it; the lowest free since the start does not depend on the window
    instant = Played(data, window_s=0.0).play()
    assert [s.report.devices[0].desktop_peak for s in instant] == nows
    assert instant[-1].report.devices[0].desktop_peak < max(nows)
    long = Played(data, window_s=60.0).play()
    assert long[-1].report.devices[0].desktop_peak == max(nows)
    assert samples[-1].lowest_free == long[-1].lowest_free == instant[-1].lowest_free
    assert instant[-1].report.devices[0].free_min > long[-1].report.devices[0].free_min


def test_a_card_lost_mid_recording_is_dropped_with_the_real_error() -> None:
    data = raw("two_gpus.json")
    data["devices"][1]["memory_v2"][2] = {"error": "GpuIsLost"}
    check = ReplayNvml(copy.deepcopy(data))
    check.init()
    handle = check.device_handle(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        for _ in range(3):
            check.memory_v2(handle)
    samples = Played(data).play()
    assert [len(s.report.devices) for s in samples] == [2, 2, 1, 1]
    assert samples[2].report.devices[0].index == 0
    lost = [w for w in samples[2].report.warnings if "GPU 1" in w]
    assert lost and "GpuIsLost" in lost[0]
    assert samples[3].report.warnings == samples[2].report.warnings  # said once, kept
    assert len(samples[2].lowest_free) == 1


def test_every_card_lost_ends_the_poller_with_the_probe_error() -> None:
    data = raw("rtx3090_wayland.json")
    data["devices"][0]["memory_v2"][3] = {"error": "GpuIsLost"}
    played = Played(data)
    played.poller.start()
    played.clock.advance(10.0)  # the rest of the recording at once: played in order, none skipped
    got = [played.next() for _ in range(4)]
    assert [s.seq for s in got] == [0, 1, 2, 3]
    assert [len(s.report.devices) for s in got] == [1, 1, 1, 0]
    assert got[-1].final and isinstance(played.poller.failure, GpuProbeError)
    with pytest.raises(GpuProbeError) as expected:
        probe(snapshot=data)  # type: ignore[arg-type]
    assert played.poller.failure.message == expected.value.message
    assert played.poller.wait(lambda s: False, WAIT_S) is got[-1]  # final ends any wait
    played.poller.stop()
    backend = played.poller.backend
    assert (backend.init_calls, backend.shutdown_calls) == (1, 1)


def test_init_errors_are_raised_by_start_and_no_driver_is_a_ram_sample() -> None:
    failing = TelemetryPoller(snapshot=raw("driver_not_loaded.json"), clock=ManualClock())
    with pytest.raises(GpuProbeError, match="kernel module is not loaded"):
        failing.start()
    assert failing.backend.init_calls == 0
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        failing.backend.init()  # the recording raises pynvml's own class

    cpu = TelemetryPoller(snapshot=raw("no_gpu.json"), clock=ManualClock())
    sample = cpu.start()
    cpu.stop()
    assert sample.final and sample.report.source == "cpu" and sample.report.cpu is not None
    assert sample.report.note == probe(snapshot=FIXTURES / "no_gpu.json").note
    assert sample.lowest_free == ()


def test_a_blocked_subscriber_does_not_slow_the_sampling() -> None:
    played = Played(raw("rtx3090_wayland.json"))
    gate, entered = threading.Event(), threading.Event()

    def stuck(sample: GpuSample) -> None:
        entered.set()
        gate.wait()

    blocked = played.poller.subscribe(stuck, queue_size=2)
    samples = played.play()  # every sample arrives while the other subscriber is stuck
    assert entered.is_set() and blocked.delivered == 0
    assert [s.seq for s in samples] == list(range(8))
    gate.set()
    assert blocked.flush(WAIT_S)
    assert blocked.delivered == 3 and blocked.dropped == 5  # held one, then the newest two
    played.poller.stop()


def test_pids_named_later_are_classed_as_homelab_from_the_next_sample() -> None:
    data = raw("rtx3090_wayland.json")
    played = Played(data)
    first = played.poller.start()
    assert played.next() is first
    job = next(p for p in first.report.devices[0].processes or () if p.klass == "compute")
    assert first.report.devices[0].homelab_bytes == 0
    played.poller.set_own_pids(frozenset({job.pid}))
    played.clock.advance(0.25)
    second = played.next()
    ours = [p for p in second.report.devices[0].processes or () if p.pid == job.pid]
    assert [p.klass for p in ours] == ["homelab"]
    assert second.report.devices[0].homelab_bytes == ours[0].used_bytes > 0
