"""Benchmark: the gate's own work per request (no sockets), this tree against a git revision.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_gate_own_work.py [--against REV] [--rounds N]

What ``homelab.gate.forward.complete`` does for a chat that runs at once, minus the HTTP:
parse the body, the estimate, the completion cap, enter and release the admission queue,
the slot book, the forwarded body, the answer's accounting and the reuse book. Two
bodies: a small chat (the latency bench's) and an agent's turn (a ~100 KB system prompt
and twenty turns of history). Each side runs in its own interpreter (``REV`` extracted
with ``git archive``), alternating, ``--rounds`` times; the number is CPU time
(``time.process_time``, so a loaded machine's waiting is not in it), best of five
repeats per round, then the median over the rounds. Baseline: ``REV``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time, timeit
sys.path.insert(0, sys.argv[1])
from homelab.gate import forward
from homelab.gate.affinity import ReuseBook, SlotBook
from homelab.gate.limits import Limits
from homelab.gate.metrics import GateMetrics
from homelab.gate.requests import ROUTES, completion_cap, forwarded_body, parse
from homelab.gate.sse import outcome_of
from homelab.gate.waiting import AdmissionQueue

CHAT = ROUTES["/v1/chat/completions"]
agent = sys.argv[2] == "agent"
last = {"role": "user", "content": "In one sentence: why is the sky blue?"}
if agent:
    turns = [{"role": r, "content": f"turn {i} " * 50} for i, r in enumerate(["user", "assistant"] * 10)]
    messages = [{"role": "system", "content": "word " * 20000}, *turns, last]
else:
    messages = [last]
raw = json.dumps({"model": "m", "messages": messages, "max_tokens": 4, "temperature": 0}).encode()
answer = json.dumps({
    "choices": [{"message": {"content": "x" * (8000 if agent else 10)}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16},
    "timings": {"cache_n": 11, "prompt_n": 1, "predicted_n": 4},
}).encode()
queue = AdmissionQueue(Limits(1 << 30, 1 << 30, 1, 1, "plan"), 64, GateMetrics())
slots, reuse = SlotBook(1), ReuseBook()
reconciles = "queue.reconcile(ticket, outcome.prompt + completion)" in open(forward.__file__).read()

def one():
    asked = parse(CHAT, raw)
    estimate = forward.estimate_if_it_runs_now(queue, asked, 8192)[0]
    prompt = estimate if isinstance(estimate, int) else estimate[0]
    completion = completion_cap(asked, prompt, cap=8192, ceiling=queue.limits.ceiling_tokens)
    ticket = queue.enter(prompt + completion)
    slot = slots.take(asked.conversation)
    forwarded_body(asked, completion, slot)
    outcome = outcome_of(answer)
    if reconciles and outcome.prompt != prompt:  # as that revision's complete() does
        queue.reconcile(ticket, outcome.prompt + completion)
    reuse.record(asked.conversation, outcome.cached or 0, outcome.processed or 0, slot)
    slots.give(slot)
    queue.release(ticket)

n = 300 if agent else 3000
print(min(timeit.repeat(one, number=n, repeat=5, timer=time.process_time)) / n)
"""


def measure(root: Path, body: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), body], check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.against, "homelab"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        sides = {args.against: Path(tmp), "this tree": ROOT}
        print(f"baseline: {args.against}; CPU per request, median of {args.rounds} rounds")
        for body in ("small", "agent"):
            times: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(args.rounds):
                for name, root in sides.items():
                    times[name].append(measure(root, body))
            base = statistics.median(times[args.against])
            for name in sides:
                t = statistics.median(times[name])
                print(f"  {body:5s} {name:>12s}: {t * 1e6:8.1f} µs  ({t / base:.2f} × baseline)")


if __name__ == "__main__":
    main()
