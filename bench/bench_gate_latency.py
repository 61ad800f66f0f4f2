"""Benchmark: what the gate adds in front of the real llama-server, against the engine direct.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_gate_latency.py [--pairs N] [--streams N]

It starts llama-server (``homelab engine path``) on SmolLM2-135M-Instruct Q4_1 under homelab's
supervisor (``-c 2048 -np 1 -t 1`` by default) and the real gate (``homelab.gate.runner.GateRunner``,
default settings, the plan's facts for that engine) in its own process, as ``homelab serve``
runs it apart from its clients. One bare HTTP/1.1 client (``bench/_gate_common.py``, one
keep-alive connection per path) sends the *same* requests to both, alternating which goes
first in each pair, so both see the same engine and the same machine load. Baseline: direct.

1. **per request**: ``--pairs`` non-streaming chat completions (``max_tokens`` 4,
   temperature 0, the same prompt, so the engine's work is the same each time): p50/p90 of
   the round trip on each path, the percentiles' difference and the median (and p90) of
   the paired differences. Goal: <= 1 ms added at p50. In the same rotation it times the
   engine's ``/v1/chat/completions/input_tokens`` directly (the exact prompt count the gate
   asks for before it admits a chat), so the report can say how much of the added time is
   that engine round trip and how much is the gate's own.
2. **streaming**: ``--streams`` pairs of streamed chat completions of ``--max-tokens``
   tokens (``ignore_eos``, so both generate the same count): time to first token (added,
   paired) and tokens/s from the first to the last token on each path; the throughput ratio
   gate / direct (median of the paired ratios and ratio of the medians). Goal: >= 0.95.

It prints PASS/MISS against the goals (a report, not an assert) and the gate's own state
at the end (admitted, refused, cache hit rate). On a 2-core machine shared with other work
the engine's own jitter (milliseconds) is larger than the gate's cost; the paired median
is the number to read, and more pairs make it steadier.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from _gate_common import (
    EngineConfig,
    GateProcess,
    Http,
    median,
    ms,
    p50_p90_p99,
    paired,
    running_engine,
    verdict,
)

from homelab.engine.supervision.facts import PlanFacts

DIRECT, GATE, COUNT = "direct", "gate", "count"
COUNT_PATH = "/v1/chat/completions/input_tokens"
"""The engine endpoint the gate asks for a chat's exact prompt tokens before admitting it."""
PROMPT = "In one sentence: why is the sky blue?"
GOAL_ADDED_S = 0.001
GOAL_THROUGHPUT = 0.95


def facts_for(config: EngineConfig) -> PlanFacts:
    """What a plan for this engine would have recorded (split slots, f16 cache)."""
    return PlanFacts(
        slots=config.slots,
        ctx_total=config.ctx,
        ctx_per_slot=config.ctx // config.slots,
        kv_tokens=config.ctx,
        unified=False,
        cache_type_k="f16",
        cache_type_v="f16",
    )


def chat(max_tokens: int, *, stream: bool) -> dict[str, object]:
    request: dict[str, object] = {
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 1,
        "cache_prompt": True,
    }
    if stream:
        request |= {"stream": True, "ignore_eos": True}
    return request


def order(i: int) -> tuple[str, str]:
    return (DIRECT, GATE) if i % 2 == 0 else (GATE, DIRECT)


async def per_request(urls: dict[str, str], pairs: int, warmup: int) -> dict[str, list[float]]:
    """Round trips of the same non-streaming chat direct and through the gate, and of the
    engine's own prompt count (what the gate asks before it admits a chat), rotated."""
    request = chat(4, stream=False)
    count = {"messages": request["messages"]}
    calls = {
        DIRECT: (urls[DIRECT], "/v1/chat/completions", request),
        GATE: (urls[GATE], "/v1/chat/completions", request),
        COUNT: (urls[DIRECT], COUNT_PATH, count),
    }
    conns = {name: Http(url) for name, (url, _, _) in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    try:
        for i in range(warmup + pairs):
            for name in names[i % 3 :] + names[: i % 3]:
                _, path, body = calls[name]
                started = time.monotonic_ns()
                reply = await conns[name].post(path, body)
                if reply.status != 200:
                    raise RuntimeError(f"{name}: HTTP {reply.status}: {reply.body[:300]!r}")
                if i >= warmup:
                    times[name].append((reply.done_ns - started) / 1e9)
    finally:
        for conn in conns.values():
            await conn.close()
    return times


async def streaming(
    urls: dict[str, str], streams: int, max_tokens: int
) -> dict[str, dict[str, list[float]]]:
    conns = {path: Http(url) for path, url in urls.items()}
    out: dict[str, dict[str, list[float]]] = {p: {"ttft": [], "tps": []} for p in (DIRECT, GATE)}
    request = chat(max_tokens, stream=True)
    try:
        for i in range(1 + streams):
            for path in order(i):
                started = time.monotonic_ns()
                reply = await conns[path].post("/v1/chat/completions", request, stream=True)
                tokens = [at for at, event in reply.event_json() if _has_content(event)]
                if reply.status != 200 or len(tokens) < 2:
                    raise RuntimeError(f"{path}: HTTP {reply.status}, {len(tokens)} tokens")
                if i:
                    out[path]["ttft"].append((tokens[0] - started) / 1e9)
                    span = (tokens[-1] - tokens[0]) / 1e9
                    out[path]["tps"].append((len(tokens) - 1) / span)
    finally:
        for conn in conns.values():
            await conn.close()
    return out


def _has_content(event: dict[str, object]) -> bool:
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
    return isinstance(delta, dict) and bool(delta.get("content"))


def show(title: str, values: dict[str, list[float]]) -> float:
    """Print both paths' percentiles and the paired difference; return its median (s)."""
    print(f"\n{title}")
    base = p50_p90_p99(values[DIRECT])
    for path in (DIRECT, GATE):
        p50, p90, p99 = p50_p90_p99(values[path])
        line = f"  {path:<7} p50 {ms(p50)}  p90 {ms(p90)}  p99 {ms(p99)}"
        if path == GATE:
            line += f"   added p50 {ms(p50 - base[0])}  p90 {ms(p90 - base[1])}"
        print(line + f"  (n={len(values[path])})")
    diffs = paired(values[DIRECT], values[GATE])
    d50, d90, _ = p50_p90_p99(diffs)
    print(f"  paired gate - direct: median {ms(d50)}, p90 {ms(d90)}")
    return d50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="non-streaming pairs (200)")
    parser.add_argument("--streams", type=int, default=12, help="streaming pairs (12)")
    parser.add_argument("--max-tokens", type=int, default=128, help="per stream (128)")
    parser.add_argument("--threads", type=int, default=1, help="llama-server -t (default 1)")
    parser.add_argument("--model", type=Path, help="a GGUF (default SmolLM2-135M Q4_1)")
    args = parser.parse_args()

    config = EngineConfig(ctx=2048, slots=1, threads=args.threads)
    with running_engine(config, args.model) as (engine, model, binary):
        with GateProcess(engine, {"port": 0}, facts_for(config)) as gate:
            urls = {DIRECT: engine, GATE: gate.url}
            print(
                f"engine {binary}\nmodel  {model.name}, -c {config.ctx} -np {config.slots} "
                f"-t {config.threads}; gate {gate.url} -> engine {engine} (default settings, own "
                f"process); pairs alternate which path goes first; baseline: direct"
            )
            times = asyncio.run(per_request(urls, args.pairs, warmup=10))
            added = show(
                f"per request: non-streaming chat, max_tokens 4, {args.pairs} pairs", times
            )
            c50, c90, _ = p50_p90_p99(times[COUNT])
            print(
                f"  of which the engine's prompt count ({COUNT_PATH}, asked by the gate before "
                f"admission), direct: p50 {ms(c50)}, p90 {ms(c90)}; the gate's added p50 less "
                f"that: {ms(added - c50)}"
            )
            out = asyncio.run(streaming(urls, args.streams, args.max_tokens))
            ttft = show(
                f"streaming: time to first token, {args.streams} pairs of {args.max_tokens} tokens",
                {p: v["ttft"] for p, v in out.items()},
            )
            ratios = [g / d for d, g in zip(out[DIRECT]["tps"], out[GATE]["tps"], strict=True)]
            direct_tps, gate_tps = median(out[DIRECT]["tps"]), median(out[GATE]["tps"])
            print(
                f"  tokens/s: direct {direct_tps:.1f}, gate {gate_tps:.1f}; ratio of medians "
                f"{gate_tps / direct_tps:.3f}, median paired ratio {median(ratios):.3f}"
            )
            state = gate.state()
    throughput = median(ratios)
    print(
        f"\ngate state at the end: admitted {state.get('admitted')}, refused "
        f"{state.get('refused')}, upstream errors {state.get('upstream_errors')}, cache hit "
        f"rate {state.get('cache_hit_rate')}, budget {state.get('budget_tokens')} tokens"
    )
    print("\ngoals (paired medians):")
    print(
        f"  added per request p50 {added * 1e3:+.3f} ms (goal <= {GOAL_ADDED_S * 1e3:.0f} ms): "
        f"{verdict(added <= GOAL_ADDED_S)}"
    )
    print(f"  added time to first token p50 {ttft * 1e3:+.3f} ms (same goal, for information)")
    print(
        f"  streaming throughput gate/direct {throughput:.3f} (goal >= {GOAL_THROUGHPUT}): "
        f"{verdict(throughput >= GOAL_THROUGHPUT)}"
    )


if __name__ == "__main__":
    main()
