"""Benchmark: what a subscriber costs the producer of live events.

Run on demand (not a test): ``python bench/bench_live_events.py [--events N] [--repeat R]``.

It publishes N small frozen events through ``homelab.events.EventHub`` with no subscriber
(the baseline), with one subscriber that keeps up, and with one subscriber stuck in its
callback for the whole run (a TUI that froze), and prints the best-of-R time per publish
and the ratio to the baseline (goal: publishing never waits for a subscriber, so a stuck
one costs the producer microseconds per event, like one that keeps up; on a busy machine
the ratios are noisy, compare them within one run). Then it plays the 8-sample Wayland recording through the GPU
telemetry poller on a manual clock, with and without a stuck subscriber, and prints the
time per sample: the poller's sampling does not depend on its subscribers.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from homelab.events import EventHub
from homelab.gpu.telemetry import GpuSample, TelemetryPoller
from tests.factory.clock import ManualClock

RECORDING = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpu" / "rtx3090_wayland.json"
)


@dataclass(frozen=True, slots=True)
class Event:
    n: int


def publish_run(events: int, subscriber: str) -> float:
    """Seconds to publish ``events`` events with ``subscriber`` ("none", "fast", "stuck")."""
    hub: EventHub[Event] = EventHub("bench")
    gate = threading.Event()
    if subscriber == "fast":
        hub.subscribe(lambda e: None)
    elif subscriber == "stuck":
        hub.subscribe(lambda e: gate.wait())
    started = time.perf_counter()
    for n in range(events):
        hub.publish(Event(n))
    took = time.perf_counter() - started
    gate.set()
    hub.close()
    return took


def telemetry_run(stuck: bool) -> float:
    """Seconds per sample to play the recording through the poller."""
    clock = ManualClock()
    poller = TelemetryPoller(snapshot=RECORDING, clock=clock)
    gate = threading.Event()
    if stuck:
        poller.subscribe(lambda s: gate.wait())
    done = threading.Event()
    seen: list[GpuSample] = []

    def take(sample: GpuSample) -> None:
        seen.append(sample)
        if sample.final:
            done.set()

    poller.subscribe(take)
    started = time.perf_counter()
    poller.start()
    clock.advance(60.0)  # the whole recording at once: every sample, in order
    poller.wait(lambda s: s.final, 60.0)
    took = time.perf_counter() - started
    gate.set()
    done.wait(60.0)
    poller.stop()
    return took / len(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    best = {
        kind: min(publish_run(args.events, kind) for _ in range(args.repeat))
        for kind in ("none", "fast", "stuck")
    }
    base = best["none"]
    for kind, took in best.items():
        per = took / args.events * 1e6
        print(f"publish, {kind:5} subscriber: {per:6.2f} us/event  ({took / base:4.2f}x baseline)")
    free = min(telemetry_run(False) for _ in range(args.repeat))
    stuck = min(telemetry_run(True) for _ in range(args.repeat))
    print(
        f"telemetry replay: {free * 1e3:.2f} ms/sample; with a stuck subscriber "
        f"{stuck * 1e3:.2f} ms/sample ({stuck / free:4.2f}x)"
    )


if __name__ == "__main__":
    main()
