"""The compositor growth comparison on replayed telemetry (``homelab.plan.headroom``).

The growth recording is ``tests/fixtures/gpu/constructed_desktop_growth.json``, written by
hand from the 3090 Wayland scenario (its comment says how): three steady samples, then
kwin_wayland grows by 700 MiB. It is played through the real telemetry poller on a
:class:`ManualClock`; the plan's budget is the real ``device_budget`` of the first sample.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from homelab.gpu.telemetry import GpuSample, TelemetryPoller
from homelab.plan.budget import HEADROOM_DISPLAY, device_budget
from homelab.plan.headroom import ALARM_FRACTION, desktop_growth
from homelab.units import MiB
from tests.factory.clock import ManualClock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
GROWTH = FIXTURES / "constructed_desktop_growth.json"
WAIT_S = 30.0  # a bound for a loaded machine, never an expectation


def _samples(path: Path) -> list[GpuSample]:
    """Every sample of the recording, the clock moved to each recorded time in turn."""
    clock = ManualClock()
    poller = TelemetryPoller(snapshot=path, clock=clock)
    samples = [poller.start()]
    try:
        while not samples[-1].final:
            assert clock.wait_for_waiter(WAIT_S)
            clock.advance(1.0)
            seq = samples[-1].seq + 1
            got = poller.wait(lambda s, seq=seq: s.seq >= seq, WAIT_S)
            assert got is not None
            samples.append(got)
    finally:
        poller.stop()
    return samples


def test_steady_desktop_has_not_grown() -> None:
    samples = _samples(GROWTH)
    budget = device_budget(samples[0].report, 0)
    growth = desktop_growth(budget, samples[2].report, samples[0].report)
    assert growth is not None
    assert growth.grown == 0
    assert not growth.alarming and not growth.exhausted
    assert growth.headroom_left == HEADROOM_DISPLAY


def test_kwin_growth_is_named_with_its_bytes() -> None:
    samples = _samples(GROWTH)
    assert len(samples) == 6
    budget = device_budget(samples[0].report, 0)
    growth = desktop_growth(budget, samples[-1].report, samples[0].report)
    assert growth is not None
    assert growth.grown == 700 * MiB  # the window's desktop peak over the planned one
    assert growth.headroom == HEADROOM_DISPLAY
    assert growth.alarming  # 700 MiB > a quarter of 1 GiB
    assert not growth.exhausted
    assert growth.headroom_left == HEADROOM_DISPLAY - 700 * MiB
    culprit = growth.culprit
    assert culprit is not None
    assert culprit.name is not None and culprit.name.endswith("kwin_wayland")
    assert culprit.grown == 700 * MiB
    others = [p.grown for p in growth.processes[1:]]
    assert others and all(g == 0 for g in others)


def test_growth_past_the_headroom_is_exhausted() -> None:
    samples = _samples(GROWTH)
    budget = device_budget(samples[0].report, 0)
    small = dataclasses.replace(budget, headroom=512 * MiB)
    growth = desktop_growth(small, samples[-1].report, samples[0].report)
    assert growth is not None and growth.exhausted and growth.headroom_left < 0


def test_alarm_threshold_is_a_quarter_of_the_headroom() -> None:
    samples = _samples(GROWTH)
    budget = device_budget(samples[0].report, 0)
    # The same 700 MiB against a headroom a bit more / a bit less than 4 x 700 MiB.
    just_under = dataclasses.replace(budget, headroom=int(700 * MiB / ALARM_FRACTION) + MiB)
    just_over = dataclasses.replace(budget, headroom=int(700 * MiB / ALARM_FRACTION) - MiB)
    grown_under = desktop_growth(just_under, samples[-1].report, samples[0].report)
    grown_over = desktop_growth(just_over, samples[-1].report, samples[0].report)
    assert grown_under is not None and not grown_under.alarming
    assert grown_over is not None and grown_over.alarming


def test_without_the_plans_report_the_biggest_desktop_process_is_named() -> None:
    samples = _samples(GROWTH)
    budget = device_budget(samples[0].report, 0)
    growth = desktop_growth(budget, samples[-1].report)
    assert growth is not None and growth.grown == 700 * MiB
    assert growth.culprit is not None and growth.culprit.grown is None
    biggest = max(growth.processes, key=lambda p: p.now)
    assert growth.culprit == biggest


def test_nothing_to_compare_on_system_ram_or_another_card() -> None:
    no_gpu = _samples(FIXTURES / "no_gpu.json")[0].report
    ram = device_budget(no_gpu)
    assert desktop_growth(ram, no_gpu) is None
    samples = _samples(GROWTH)
    budget = device_budget(samples[0].report, 0)
    other_card = dataclasses.replace(budget, name="GPU 7: not here")
    assert desktop_growth(other_card, samples[-1].report) is None
