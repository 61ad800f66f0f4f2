"""Benchmark: ``homelab plan`` on a 40,000-tensor MoE header against the plan start-up figure.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_plan_many_tensors.py [--repeat N] [--blocks N]

It writes, in a temporary folder, two header-only GGUFs (the data sections are sparse
holes): the plan start-up bench's Qwen3.5-9B ``Q4_K_M`` (``bench_plan_startup``: the
"plan start-up" figure, a ~10 MB header of 427 tensors), and a qwen3moe-shaped
``Q4_K_M`` of ``--blocks`` blocks (default 3,333: 12 tensors a block, 39,999 in all;
32 experts of 256 a block, hidden 512, 8 q heads and 1 KV head of 64, 8,192 trained
tokens) whose ~23 GB of weights do not fit the 16 GiB synthetic card whole, so the
offload ladder's second rung searches the experts-in-RAM block count (a bisection, each
step a full plan). Its blocks are written in two ways, as a real ``Q4_K_M``'s are (the
factory's type rule gives some blocks more bits), so the reader's whole-block path
(:mod:`homelab.gguf.tensor_records`) meets two templates, not one.

Then, interleaved, ``--repeat`` times each (default 5): the ``homelab plan FILE --json
--vram 16GiB`` process on each header, and ``python -c pass``. It prints the median wall
and CPU times, and the ratio of the 40k-tensor plan to the start-up plan. Goal (issue 19):
the 40k-tensor plan stays under the start-up figure + 20 % (ratio <= 1.20). It also times
the planning alone in this process (read the header, ``make_plan``) for both, to show
where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

import os

from bench_plan_startup import _run, write_qwen35_9b

from tests.factory.header_only import write_qwen3_30b_a3b_q4_k_m

MANY = {
    "n_embd": 512,
    "n_ff": 1024,
    "n_head": 8,
    "n_head_kv": 1,
    "head_dim": 64,
    "n_expert": 32,
    "n_expert_used": 4,
    "n_ff_exp": 256,
    "n_ctx_train": 8192,
    "n_vocab": 32_000,
}
"""A qwen3moe narrow enough that thousands of blocks still make a ~23 GB model."""
START = "plan start-up (9B header)"
MANY_LABEL = "plan of the 40k-tensor header"


def _in_process(path: Path, repeat: int) -> float:
    """Median seconds of read_model + make_plan in this process (the planning alone)."""
    from homelab.gguf.model_file import read_model
    from homelab.gpu.report import synthetic_report
    from homelab.plan.planner import PlanRequest, make_plan
    from homelab.units import GiB

    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        model = read_model(str(path))
        make_plan(model, str(path), synthetic_report(16 * GiB), PlanRequest())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="median of N runs each (default 5)")
    parser.add_argument("--blocks", type=int, default=3333, help="blocks of the big header")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    with tempfile.TemporaryDirectory(prefix="homelab-bench-") as folder:
        start_path = Path(folder) / "Qwen3.5-9B-Q4_K_M-bench.gguf"
        many_path = Path(folder) / "many-tensors-moe-Q4_K_M.gguf"
        write_qwen35_9b(start_path)
        write_qwen3_30b_a3b_q4_k_m(many_path, n_layer=args.blocks, **MANY)
        from homelab.gguf.model_file import read_model

        many = read_model(str(many_path))
        print(
            f"{many_path.name}: {len(many.tensors):,} tensors, "
            f"{(many.weights_bytes or 0) / 1e9:.1f} GB of weights (sparse), header "
            f"{many.header.header_bytes / 1e6:.1f} MB"
        )
        plan = [sys.executable, "-m", "homelab", "plan"]
        runs = {
            "python -c pass": [sys.executable, "-c", "pass"],
            START: [*plan, str(start_path), "--json", "--vram", "16GiB"],
            MANY_LABEL: [*plan, str(many_path), "--json", "--vram", "16GiB"],
        }
        for label, argv in runs.items():  # warm the page cache; each must work
            _, _, code, err = _run(argv, env)
            if code != 0:
                raise SystemExit(f"{label} failed (exit {code}):\n{err}")
        wall: dict[str, list[float]] = {label: [] for label in runs}
        cpu: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(args.repeat):
            for label, argv in runs.items():
                w, c, _, _ = _run(argv, env)
                wall[label].append(w)
                cpu[label].append(c)
        planning = {START: _in_process(start_path, args.repeat)}
        planning[MANY_LABEL] = _in_process(many_path, args.repeat)
    for what, times in (("wall time", wall), ("CPU time (user+sys)", cpu)):
        medians = {label: statistics.median(v) for label, v in times.items()}
        print(f"{what}, median of {args.repeat}:")
        for label, value in medians.items():
            print(f"  {label:<32} {value:7.3f} s")
        ratio = medians[MANY_LABEL] / medians[START]
        verdict = "within" if ratio <= 1.2 else "OVER"
        print(f"  ratio 40k-tensor / start-up: {ratio:.2f} ({verdict} the 1.20 goal)")
    print("planning alone, in this process (read header + make_plan), median:")
    for label, value in planning.items():
        print(f"  {label:<32} {value:7.3f} s")


if __name__ == "__main__":
    main()
