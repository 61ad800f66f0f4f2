"""Soak: the real gate in front of the real llama-server under mixed good and hostile
clients for minutes, then checked flat.

Run on demand (not a test; the suite's short version is ``tests/gate/test_gate_soak.py``)::

    PYTHONPATH=$PWD python bench/bench_gate_soak.py [--minutes 30] [--baseline 40]

It starts llama-server on SmolLM2-135M-Instruct Q4_1 (``-c 4096 -np 2 -t 1``, homelab's
supervisor, ``bench/_gate_common.py``) and the real gate in its own process
(``bench/_gate_process.py``, its log captured), all on 127.0.0.1. Then:

1. **baseline**: ``--baseline`` good chats (8 tokens, streamed and not in turn) one after
   another with no other traffic; their round trips.
2. **soak**: ``--minutes`` of the mix in ``tests/gate/soak_mix.py``: the same good chats
   beside bad JSON (5/s), oversized prompts (1/s), streams dropped after their first chunk
   (one each 2 s), idle sockets (1/s) and slow senders (a header byte each 0.5 s; one
   each 3 s), each loop one at a time at its pace, every exchange with a deadline.
3. **after**: the gate is given up to 60 s to settle, then its RSS, open descriptors and
   charged tokens are compared with the start of the soak (after the baseline, with the
   engine connections' 2 s keep-alive run out): RSS within ``--rss-tolerance-mib``
   (16 MiB by default, a third of the gate's ~48 MiB: at the ~13 requests a second here,
   a leak of 1 KiB a request goes past it within the 30 minutes), fds
   back to the start, charge 0; and no traceback in its log.

It prints the requests by outcome, the good requests' p50/p90 in the baseline and during
the soak, and their ratio (soak / baseline: what hostile traffic costs a good client on
this machine), and PASS/MISS for each flatness check; it exits 1 when one misses.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from _gate_common import EngineConfig, pct, running_engine, split_facts, verdict
from _gate_process import GateProcess

from tests.gate.soak_mix import Mix, Pace, Tally

IDLE_TIMEOUT_S = 3.0
"""The gate's idle timeout in the soak: idle and slow sockets are cut after it."""
SETTLE_S = 60.0
POOL_DRAIN_S = 3.0
"""A little over the gate's keep-alive for its engine connections (2 s): the descriptors
counted at the start are the gate's own, not a pool's passing ones."""


def gate_numbers(gate: GateProcess) -> tuple[int, int, int]:
    """(RSS bytes, open descriptors, charged tokens) of the gate process now."""
    import psutil

    proc = psutil.Process(gate.pid)
    return proc.memory_info().rss, proc.num_fds(), int(gate.state()["charged_tokens"])


def settle(gate: GateProcess, fds: int) -> tuple[int, int, int]:
    """The gate's numbers once its charge is 0 and its fds are back to ``fds`` (or after
    :data:`SETTLE_S`, whatever they are then)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        numbers = gate_numbers(gate)
        if (numbers[2] == 0 and numbers[1] <= fds) or time.monotonic() > deadline:
            return numbers
        time.sleep(0.5)


def p50_p90(values: list[float]) -> tuple[float, float]:
    return pct(values, 50), pct(values, 90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--baseline", type=int, default=40, help="good chats alone first")
    parser.add_argument("--rss-tolerance-mib", type=float, default=16.0)
    args = parser.parse_args()
    config = EngineConfig(ctx=4096, slots=2, threads=1)
    settings = {"port": 0, "idle_timeout_s": IDLE_TIMEOUT_S, "max_tokens_cap": 64}
    with (
        running_engine(config) as (engine_url, _, _),
        tempfile.NamedTemporaryFile(prefix="homelab-soak-gate-", suffix=".log") as log,
        GateProcess(engine_url, settings, split_facts(config), stderr=log) as gate,
    ):
        mix = Mix(gate.url)
        asyncio.run(mix.good_loop(float("inf"), most=4))  # warm-up, not counted
        mix.tally.good_s.clear()
        asyncio.run(mix.good_loop(float("inf"), most=args.baseline))
        baseline = list(mix.tally.good_s)
        mix.tally = Tally()  # the soak's own outcomes from here
        time.sleep(POOL_DRAIN_S)
        start = gate_numbers(gate)
        print(f"soak: {args.minutes:g} min against {gate.url} (engine {engine_url})", flush=True)
        asyncio.run(mix.soak(args.minutes * 60, Pace(), IDLE_TIMEOUT_S))
        end = settle(gate, start[1])
        tracebacks = Path(log.name).read_bytes().count(b"Traceback")
    return report(mix, baseline, start, end, tracebacks, args.rss_tolerance_mib)


def report(
    mix: Mix,
    baseline: list[float],
    start: tuple[int, int, int],
    end: tuple[int, int, int],
    tracebacks: int,
    tolerance_mib: float,
) -> int:
    tally = mix.tally
    print("\nrequests by outcome:")
    for name, count in sorted(tally.outcomes.items()):
        print(f"  {name:<32} {count:>7}")
    for why in tally.failures[:10]:
        print(f"  FAILED: {why}")
    b50, b90 = p50_p90(baseline)
    s50, s90 = p50_p90(tally.good_s)
    print("\ngood chats (round trip):")
    print(f"  baseline  n={len(baseline):<6} p50 {b50 * 1e3:8.1f} ms  p90 {b90 * 1e3:8.1f} ms")
    print(f"  soak      n={len(tally.good_s):<6} p50 {s50 * 1e3:8.1f} ms  p90 {s90 * 1e3:8.1f} ms")
    print(f"  ratio soak/baseline      p50 {s50 / b50:8.2f}     p90 {s90 / b90:8.2f}")
    mib = 1024 * 1024
    grown = (end[0] - start[0]) / mib
    checks = {
        f"RSS {start[0] / mib:.1f} → {end[0] / mib:.1f} MiB "
        f"({grown:+.1f}, tolerance {tolerance_mib:g})": grown <= tolerance_mib,
        f"open fds {start[1]} → {end[1]} (back to the start)": end[1] <= start[1],
        f"charged tokens {start[2]} → {end[2]} (0)": end[2] == 0,
        f"tracebacks in the gate's log: {tracebacks}": tracebacks == 0,
        f"good chats not answered 200: {len(tally.failures)}": not tally.failures,
    }
    print("\nflat after the soak:")
    for what, ok in checks.items():
        print(f"  {verdict(ok)}  {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
