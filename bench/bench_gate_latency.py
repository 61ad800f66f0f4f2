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

3. **the gate's own cost**: the same per-request pairs, plus per-event latency of streams
   whose events carry the upstream's ``time.monotonic_ns()`` and a burst's events/s,
   against ``bench/_sse_upstream.py`` (a llama-server-shaped upstream answering at once, in
   its own process) instead of the engine: on a small shared CPU the engine's jitter (tens
   of milliseconds) hides a millisecond; this part does not. ``--no-engine`` /
   ``--no-synthetic`` run one part only.

It prints PASS/MISS against the goals for both parts (a report, not an assert) and the
gate's own state after the engine part (admitted, refused, cache hit rate). The paired
median is the number to read; more pairs make it steadier.
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
    PIDS,
    EngineConfig,
    Http,
    children,
    cpu_seconds,
    delta_text,
    median,
    ms,
    p50_p90_p99,
    paired,
    print_cpu,
    running_engine,
    split_facts,
    verdict,
)
from _gate_process import GateProcess

DIRECT, GATE, COUNT = "direct", "gate", "count"
CHAT = "/v1/chat/completions"
PROXY = "aiohttp proxy"
"""bench_http_stack's bare aiohttp proxy: what the stack alone costs, beside the gate."""
COUNT_PATH = "/v1/chat/completions/input_tokens"
"""The engine endpoint the gate asks for a chat's exact prompt tokens before admitting it."""
PROMPT = "In one sentence: why is the sky blue?"
GOAL_ADDED_S = 0.001
GOAL_THROUGHPUT = 0.95


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


def order(i: int, names: list[str] | None = None) -> list[str]:
    """The paths of round ``i``, rotated so each goes first in turn."""
    names = names or [DIRECT, GATE]
    k = i % len(names)
    return names[k:] + names[:k]


def chat_calls(urls: dict[str, str]) -> dict[str, tuple[str, str, dict[str, object]]]:
    """name → (base URL, path, body): the same small chat on every path in ``urls``; with
    the engine, also its own prompt count (what the gate asks before it admits a chat)."""
    request = chat(4, stream=False)
    calls = {name: (url, CHAT, request) for name, url in urls.items() if name != COUNT}
    if COUNT in urls:
        calls[COUNT] = (urls[COUNT], COUNT_PATH, {"messages": request["messages"]})
    return calls


async def per_request(
    calls: dict[str, tuple[str, str, dict[str, object]]], pairs: int, warmup: int
) -> dict[str, list[float]]:
    """Round-trip seconds of each call, ``pairs`` rounds in a rotating order."""
    conns = {name: Http(url) for name, (url, _, _) in calls.items()}
    times: dict[str, list[float]] = {name: [] for name in calls}
    try:
        for i in range(warmup + pairs):
            for name in order(i, list(calls)):
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
                tokens = [at for at, event in reply.event_json() if delta_text(event)]
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


def show(title: str, values: dict[str, list[float]]) -> float:
    """Print each path's percentiles and the paired difference to direct; return the
    gate's median paired difference (s)."""
    print(f"\n{title}")
    for path, series in values.items():
        p50, p90, p99 = p50_p90_p99(series)
        line = f"  {path:<14} p50 {ms(p50)}  p90 {ms(p90)}  p99 {ms(p99)}"
        if path not in (DIRECT, COUNT):
            d50, d90, _ = p50_p90_p99(paired(values[DIRECT], series))
            line += f"   added: paired median {ms(d50)}, p90 {ms(d90)}"
        print(line + f"  (n={len(series)})")
    return median(paired(values[DIRECT], values[GATE]))


async def stamped(
    urls: dict[str, str], streams: int, events: int, interval_ms: float, burst: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Synthetic upstream only: per path, every event's latency (s) = arrival - the
    upstream's stamp, and the events/s of bursts sent as fast as the upstream can."""
    conns = {path: Http(url) for path, url in urls.items()}
    latency: dict[str, list[float]] = {path: [] for path in urls}
    rates: dict[str, list[float]] = {path: [] for path in urls}
    messages = chat(1, stream=False)["messages"]
    paced = {"messages": messages, "stream": True, "n": events, "interval_ms": interval_ms}
    flood = {"messages": messages, "stream": True, "n": burst, "interval_ms": 0}
    try:
        for i in range(1 + streams):
            for path in order(i, list(urls)):
                reply = await conns[path].post(CHAT, paced, stream=True)
                got = [(at - e["t"]) / 1e9 for at, e in reply.event_json() if "t" in e]
                if reply.status != 200 or len(got) != events:
                    raise RuntimeError(f"{path}: HTTP {reply.status}, {len(got)} of {events}")
                if i:
                    latency[path] += got
        for i in range(1 + 3):
            for path in order(i, list(urls)):
                started = time.monotonic_ns()
                reply = await conns[path].post(CHAT, flood, stream=True)
                if reply.status != 200 or len(reply.events) != burst + 2:
                    raise RuntimeError(f"{path}: HTTP {reply.status}, {len(reply.events)} events")
                if i:
                    rates[path].append(len(reply.events) / ((reply.done_ns - started) / 1e9))
    finally:
        for conn in conns.values():
            await conn.close()
    return latency, rates


def engine_part(args: argparse.Namespace) -> dict[str, float]:
    config = EngineConfig(ctx=2048, slots=1, threads=args.threads)
    with running_engine(config, args.model) as (engine, model, binary):
        with GateProcess(engine, {"port": 0}, split_facts(config)) as gate:
            urls = {DIRECT: engine, GATE: gate.url, COUNT: engine}
            print(
                f"\n== the real engine: {binary}\n   model {model.name}, -c {config.ctx} -np "
                f"{config.slots} -t {config.threads}; gate {gate.url} -> engine {engine} "
                "(default settings, own process); pairs alternate which path goes first"
            )
            times = asyncio.run(per_request(chat_calls(urls), args.pairs, warmup=10))
            added = show(
                f"per request: non-streaming chat, max_tokens 4, {args.pairs} pairs", times
            )
            c50, c90, _ = p50_p90_p99(times[COUNT])
            print(
                f"  the engine's prompt count ({COUNT_PATH}, which the gate asks before "
                f"admitting a chat), direct: p50 {ms(c50)}, p90 {ms(c90)}"
            )
            del urls[COUNT]
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
    print(
        f"  gate state at the end: admitted {state.get('admitted')}, refused "
        f"{state.get('refused')}, upstream errors {state.get('upstream_errors')}, cache hit "
        f"rate {state.get('cache_hit_rate')}, budget {state.get('budget_tokens')} tokens"
    )
    return {"added": added, "ttft": ttft, "count": c50, "throughput": median(ratios)}


def synthetic_part(args: argparse.Namespace) -> dict[str, float]:
    config = EngineConfig(ctx=2048, slots=1)
    with children() as spawn:
        upstream = spawn("_sse_upstream.py")
        proxy = spawn("_proxies.py", "aiohttp", "--upstream", upstream)
        with GateProcess(upstream, {"port": 0}, split_facts(config)) as gate:
            urls = {DIRECT: upstream, PROXY: proxy, GATE: gate.url}
            print(
                f"\n== a synthetic llama-server-shaped upstream (bench/_sse_upstream.py, instant "
                f"answers, stamped events): the gate's own cost without the engine's jitter\n"
                f"   gate {gate.url} -> {upstream} (facts: 1 slot, 2048 tokens); beside it the "
                f"bare aiohttp proxy of bench_http_stack.py ({PROXY!r}) on the same upstream"
            )
            PIDS[gate.url] = gate.pid
            cpu = cpu_seconds(urls)
            times = asyncio.run(per_request(chat_calls(urls), args.pairs, warmup=20))
            cpu_after = cpu_seconds(urls)
            added = show(f"per request: non-streaming chat, {args.pairs} pairs", times)
            print_cpu(cpu, cpu_after, args.pairs + 20, "request")
            cpu = cpu_seconds(urls)
            latency, rates = asyncio.run(
                stamped(urls, args.streams, args.events, args.interval_ms, args.burst)
            )
            cpu_after = cpu_seconds(urls)
            event = show(
                f"per event: {args.streams} streams of {args.events} events "
                f"{args.interval_ms:g} ms apart (arrival - upstream stamp)",
                latency,
            )
            throughput = median(rates[GATE]) / median(rates[DIRECT])
            print(f"\nburst of {args.burst} events as fast as the upstream writes, median of 3:")
            for path, series in rates.items():
                rate = median(series)
                print(f"  {path:<14} {rate:9,.0f} events/s, {rate / median(rates[DIRECT]):.3f}")
            events = (1 + args.streams) * args.events + 4 * (args.burst + 2)
            print_cpu(cpu, cpu_after, events, "event (the paced streams and the bursts)")
    over = median(paired(times[PROXY], times[GATE]))
    print(f"\nthe gate over the bare aiohttp proxy, per request (paired median): {ms(over)}")
    return {"added": added, "event": event, "throughput": throughput, "over_proxy": over}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="non-streaming pairs (200)")
    parser.add_argument("--streams", type=int, default=12, help="streaming pairs (12)")
    parser.add_argument("--max-tokens", type=int, default=128, help="per engine stream (128)")
    parser.add_argument("--threads", type=int, default=1, help="llama-server -t (default 1)")
    parser.add_argument("--model", type=Path, help="a GGUF (default SmolLM2-135M Q4_1)")
    parser.add_argument("--events", type=int, default=100, help="per synthetic stream (100)")
    parser.add_argument("--interval-ms", type=float, default=4.0, help="between them (4)")
    parser.add_argument("--burst", type=int, default=5000, help="synthetic burst (5000)")
    parser.add_argument("--no-engine", action="store_true", help="only the synthetic part")
    parser.add_argument("--no-synthetic", action="store_true", help="only the engine part")
    args = parser.parse_args()
    print("baseline: direct (the same requests, paired, alternating which path goes first)")
    real = None if args.no_engine else engine_part(args)
    fake = None if args.no_synthetic else synthetic_part(args)

    print("\ngoals (paired medians):")
    goal = f"goal <= {GOAL_ADDED_S * 1e3:.0f} ms"
    if real is not None:
        print(
            f"  real engine: added per request p50 {real['added'] * 1e3:+.3f} ms ({goal}): "
            f"{verdict(real['added'] <= GOAL_ADDED_S)}; of it the engine's own prompt count "
            f"{real['count'] * 1e3:.3f} ms; added TTFT p50 {real['ttft'] * 1e3:+.3f} ms"
        )
        print(
            f"  real engine: streaming throughput gate/direct {real['throughput']:.3f} (goal >= "
            f"{GOAL_THROUGHPUT}): {verdict(real['throughput'] >= GOAL_THROUGHPUT)}"
        )
    if fake is not None:
        print(
            f"  synthetic:   added per request p50 {fake['added'] * 1e3:+.3f} ms ({goal}): "
            f"{verdict(fake['added'] <= GOAL_ADDED_S)}; added per event p50 "
            f"{fake['event'] * 1e3:+.3f} ms"
        )
        print(
            f"  synthetic:   of it the gate's own logic over a bare aiohttp proxy "
            f"{fake['over_proxy'] * 1e3:+.3f} ms (its prompt count is one more round trip); "
            f"burst throughput gate/direct {fake['throughput']:.3f} (information: events at "
            "memory speed, far above any engine's token rate)"
        )


if __name__ == "__main__":
    main()
