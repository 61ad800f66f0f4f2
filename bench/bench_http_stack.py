"""Benchmark: which Python HTTP stack the gate's SSE reverse proxy should be built on.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_http_stack.py [--rounds N] [--no-engine]

Needs the ``bench`` extra (``pip install starlette uvicorn httptools``; aiohttp and httpx
are homelab dependencies). Two minimal SSE-forwarding reverse proxies, each in its own
process, forward any POST to the same upstream and stream the reply back chunk by chunk
as it arrives (no buffering, no compression):

- **aiohttp**: aiohttp ``web`` server + one ``aiohttp.ClientSession``
  (``content.iter_any()`` → ``StreamResponse.write``);
- **starlette**: Starlette ``StreamingResponse`` on uvicorn (httptools parser when
  installed, else h11) + one ``httpx.AsyncClient`` (``aiter_raw()``).

The upstream is ``bench/_sse_upstream.py`` in a third process, a bare asyncio HTTP/1.1
server shaped like llama-server (no framework, so it favours neither side): a streamed
``/v1/chat/completions`` sends N SSE events, each carrying ``time.monotonic_ns()`` taken
just before it is written; a plain one answers a small JSON body at once. The client (this process, a bare asyncio HTTP/1.1 client, one keep-alive
connection per path) stamps each event on arrival, so per event: latency = arrival −
upstream's stamp. Every round runs the same request on each path — direct to the
upstream (the baseline), via aiohttp, via starlette — in a rotating order, so the
paths are paired in one run and a machine that gets busier or quieter affects all alike.

Measured:

1. **per event** (streams of ``--events`` events ``--interval-ms`` apart), one stream at
   a time and ``--concurrency`` streams at once: p50/p90/p99 latency per path and what the
   proxy adds over direct (difference of the percentiles, and the median of the per-round
   paired differences of the stream medians);
2. **per request**: a small non-streaming POST round trip, p50/p90/p99 and added;
3. **throughput**: a burst of ``--burst`` events sent as fast as the upstream can,
   events/s per path and the ratio to direct;
4. with the real llama-server on SmolLM2 (when built and installed; ``--no-engine``
   skips it): streamed chat completions, time to first token and to the end, added per
   request (paired), and tokens/s ratio to direct.

Then it prints which stack wins and by how much. On a 2-core box with other work, p99
shows scheduler spikes for every path; compare p50/p90 and the paired medians.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from _gate_common import (
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
)
from _proxies import uvicorn_http

DIRECT, AIOHTTP, STARLETTE = "direct", "aiohttp", "starlette"
PROXIES = (AIOHTTP, STARLETTE)
PROXIES_SCRIPT = "_proxies.py"
CHAT = "/v1/chat/completions"
CHAT_PROMPT = "Write a short story about a lighthouse keeper and a cat."


# -- processes -----------------------------------------------------------------------------


@contextmanager
def processes(upstream: str | None, http: str) -> Iterator[dict[str, str]]:
    """The upstream (unless given: the engine's URL) and both proxies; yields path → URL."""
    with children() as spawn:
        base = upstream or spawn("_sse_upstream.py")
        urls = {DIRECT: base, AIOHTTP: spawn(PROXIES_SCRIPT, AIOHTTP, "--upstream", base)}
        urls[STARLETTE] = spawn(
            PROXIES_SCRIPT, STARLETTE, "--upstream", base, "--uvicorn-http", http
        )
        yield urls


def rotated(i: int) -> list[str]:
    paths = [DIRECT, AIOHTTP, STARLETTE]
    return paths[i % 3 :] + paths[: i % 3]


# -- measurements --------------------------------------------------------------------------


async def per_event(
    urls: dict[str, str], rounds: int, concurrency: int, events: int, interval_ms: float
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per path: every event's latency (ns), and each round's median event latency (ns)."""
    conns = {path: [Http(url) for _ in range(concurrency)] for path, url in urls.items()}
    request = {"stream": True, "n": events, "interval_ms": interval_ms, "pad": 40}
    every: dict[str, list[float]] = {path: [] for path in urls}
    medians: dict[str, list[float]] = {path: [] for path in urls}
    try:
        for i in range(rounds + 1):
            for path in rotated(i):
                replies = await asyncio.gather(
                    *(c.post(CHAT, request, stream=True) for c in conns[path])
                )
                if i == 0:
                    continue  # warm-up: connections opened, code paths hot
                lat = [at - e["t"] for r in replies for at, e in r.event_json() if "t" in e]
                if len(lat) != events * concurrency:
                    raise RuntimeError(f"{path}: {len(lat)} events of {events * concurrency}")
                every[path] += lat
                medians[path].append(median(lat))
    finally:
        for group in conns.values():
            for conn in group:
                await conn.close()
    return every, medians


async def per_request(urls: dict[str, str], requests: int) -> dict[str, list[float]]:
    """Per path: round-trip seconds of a small non-streaming POST, paired by index."""
    conns = {path: Http(url) for path, url in urls.items()}
    times: dict[str, list[float]] = {path: [] for path in urls}
    try:
        for i in range(requests + 20):
            for path in rotated(i):
                started = time.monotonic_ns()
                reply = await conns[path].post(
                    CHAT, {"messages": [{"role": "user", "content": "hi"}]}
                )
                if reply.status != 200:
                    raise RuntimeError(f"{path}: HTTP {reply.status}")
                if i >= 20:
                    times[path].append((reply.done_ns - started) / 1e9)
    finally:
        for conn in conns.values():
            await conn.close()
    return times


async def throughput(urls: dict[str, str], burst: int, repeat: int) -> dict[str, list[float]]:
    """Per path: events/s of a burst streamed as fast as the upstream can write."""
    conns = {path: Http(url) for path, url in urls.items()}
    rates: dict[str, list[float]] = {path: [] for path in urls}
    try:
        for i in range(repeat + 1):
            for path in rotated(i):
                started = time.monotonic_ns()
                reply = await conns[path].post(
                    CHAT, {"stream": True, "n": burst, "interval_ms": 0, "pad": 40}, stream=True
                )
                if len(reply.events) != burst + 2:
                    raise RuntimeError(f"{path}: {len(reply.events)} events of {burst + 2}")
                if i:
                    rates[path].append(burst / ((reply.done_ns - started) / 1e9))
    finally:
        for conn in conns.values():
            await conn.close()
    return rates


async def engine_streams(
    urls: dict[str, str], rounds: int, max_tokens: int
) -> dict[str, dict[str, list[float]]]:
    """Per path: time to first token, to the end (s), tokens/s of streamed chat completions."""
    conns = {path: Http(url) for path, url in urls.items()}
    request = {
        "messages": [{"role": "user", "content": CHAT_PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 1,
        "stream": True,
        "cache_prompt": True,
    }
    out: dict[str, dict[str, list[float]]] = {
        path: {"ttft": [], "total": [], "tps": []} for path in urls
    }
    try:
        for i in range(rounds + 1):
            for path in rotated(i):
                started = time.monotonic_ns()
                reply = await conns[path].post(CHAT, request, stream=True)
                tokens = [at for at, e in reply.event_json() if delta_text(e)]
                if reply.status != 200 or len(tokens) < 2:
                    raise RuntimeError(f"{path}: HTTP {reply.status}, {len(tokens)} tokens")
                if i:
                    out[path]["ttft"].append((tokens[0] - started) / 1e9)
                    out[path]["total"].append((reply.done_ns - started) / 1e9)
                    out[path]["tps"].append((len(tokens) - 1) / ((tokens[-1] - tokens[0]) / 1e9))
    finally:
        for conn in conns.values():
            await conn.close()
    return out


# -- report --------------------------------------------------------------------------------


def report_latency(title: str, values: dict[str, list[float]], *, ns: bool) -> dict[str, float]:
    """Print p50/p90/p99 per path and added over direct; return each proxy's added p50."""
    print(f"\n{title}")
    base = p50_p90_p99(values[DIRECT])
    added = {}
    for path, series in values.items():
        p50, p90, p99 = p50_p90_p99(series)
        line = f"  {path:<10} p50 {ms(p50, ns=ns)}  p90 {ms(p90, ns=ns)}  p99 {ms(p99, ns=ns)}"
        if path != DIRECT:
            line += (
                f"   added p50 {ms(p50 - base[0], ns=ns)}  p90 {ms(p90 - base[1], ns=ns)}"
                f"  p99 {ms(p99 - base[2], ns=ns)}"
            )
            added[path] = p50 - base[0]
        print(line + f"   (n={len(series)})")
    return added


def report_paired(what: str, values: dict[str, list[float]], *, ns: bool) -> dict[str, float]:
    out = {}
    for path in PROXIES:
        diffs = paired(values[DIRECT], values[path])
        out[path] = median(diffs)
        p50, p90, _ = p50_p90_p99(diffs)
        print(f"  {path:<10} paired {what}: median {ms(p50, ns=ns)}, p90 {ms(p90, ns=ns)}")
    return out


async def measure(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, float]:
    verdicts: dict[str, float] = {}
    for concurrency in (1, args.concurrency):
        cpu = cpu_seconds(urls)
        every, medians = await per_event(
            urls, args.rounds, concurrency, args.events, args.interval_ms
        )
        cpu_after = cpu_seconds(urls)
        report_latency(
            f"per event, {concurrency} stream(s) at once, {args.events} events "
            f"{args.interval_ms:g} ms apart, {args.rounds} rounds (latency = arrival - upstream stamp)",
            every,
            ns=True,
        )
        pair = report_paired("added per stream median", medians, ns=True)
        print_cpu(cpu, cpu_after, (args.rounds + 1) * concurrency * args.events, "event")
        for path in PROXIES:
            verdicts[f"event c={concurrency} {path}"] = pair[path] / 1e9
    cpu = cpu_seconds(urls)
    times = await per_request(urls, args.requests)
    cpu_after = cpu_seconds(urls)
    report_latency(f"per request: small POST round trip, {args.requests} per path", times, ns=False)
    pair = report_paired("added", times, ns=False)
    print_cpu(cpu, cpu_after, args.requests + 20, "request")
    for path in PROXIES:
        verdicts[f"request {path}"] = pair[path]
    cpu = cpu_seconds(urls)
    rates = await throughput(urls, args.burst, args.repeat)
    cpu_after = cpu_seconds(urls)
    print(f"\nthroughput: bursts of {args.burst} events, median of {args.repeat}")
    print_cpu(cpu, cpu_after, (args.repeat + 1) * args.burst, "event")
    base = median(rates[DIRECT])
    for path, series in rates.items():
        rate = median(series)
        print(f"  {path:<10} {rate:10,.0f} events/s   ratio to direct {rate / base:.3f}")
        if path != DIRECT:
            verdicts[f"throughput {path}"] = rate / base
    return verdicts


async def measure_engine(args: argparse.Namespace, urls: dict[str, str]) -> dict[str, float]:
    out = await engine_streams(urls, args.engine_rounds, args.max_tokens)
    print(
        f"\nreal llama-server (SmolLM2-135M, -t {args.engine_threads}): streamed chat, "
        f"max_tokens {args.max_tokens}, {args.engine_rounds} rounds"
    )
    report_latency("  time to first token", {p: v["ttft"] for p, v in out.items()}, ns=False)
    ttft = report_paired("added TTFT", {p: v["ttft"] for p, v in out.items()}, ns=False)
    report_latency("  whole request", {p: v["total"] for p, v in out.items()}, ns=False)
    total = report_paired("added per request", {p: v["total"] for p, v in out.items()}, ns=False)
    base = median(out[DIRECT]["tps"])
    verdicts = {}
    for path in PROXIES:
        ratio = median(out[path]["tps"]) / base
        print(
            f"  {path:<10} tokens/s {median(out[path]['tps']):7.1f} (direct {base:.1f}): {ratio:.3f}"
        )
        verdicts[f"engine ttft {path}"] = ttft[path]
        verdicts[f"engine request {path}"] = total[path]
        verdicts[f"engine tps {path}"] = ratio
    return verdicts


def summary(verdicts: dict[str, float]) -> None:
    """The decision: from the synthetic upstream (exact per-event stamps, no engine jitter)."""
    print("\nsummary (paired medians; throughput as ratio to direct, higher is better)")
    keys = sorted({k.rsplit(" ", 1)[0] for k in verdicts})
    wins = {AIOHTTP: 0, STARLETTE: 0}
    for key in keys:
        a, s = verdicts[f"{key} {AIOHTTP}"], verdicts[f"{key} {STARLETTE}"]
        if "tps" in key or "throughput" in key:
            better = AIOHTTP if a >= s else STARLETTE
            line = f"  {key:<22} aiohttp {a:7.3f}      starlette {s:7.3f}      -> {better}"
        else:
            better = AIOHTTP if a <= s else STARLETTE
            line = (
                f"  {key:<22} aiohttp {a * 1e3:+7.3f} ms   starlette {s * 1e3:+7.3f} ms   "
                f"-> {better} by {abs(s - a) * 1e3:.3f} ms"
            )
        if key.startswith("engine"):
            line += "   (information: the engine's jitter is larger)"
        else:
            wins[better] += 1
        print(line)
    winner = max(wins, key=lambda k: wins[k])
    a_event, s_event = verdicts[f"event c=1 {AIOHTTP}"], verdicts[f"event c=1 {STARLETTE}"]
    a_req, s_req = verdicts[f"request {AIOHTTP}"], verdicts[f"request {STARLETTE}"]
    a_tp, s_tp = verdicts[f"throughput {AIOHTTP}"], verdicts[f"throughput {STARLETTE}"]
    print(
        f"\nwinner: {winner} ({wins[winner]} of {sum(wins.values())} synthetic measures). "
        f"Added per event (1 stream): aiohttp {a_event * 1e3:.3f} ms, starlette/uvicorn/httpx "
        f"{s_event * 1e3:.3f} ms ({s_event / a_event:.2f}x); per request: {a_req * 1e3:.3f} vs "
        f"{s_req * 1e3:.3f} ms ({s_req / a_req:.2f}x); burst throughput {a_tp:.2f} vs "
        f"{s_tp:.2f} of direct ({a_tp / s_tp:.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="streams per path (default 20)")
    parser.add_argument("--events", type=int, default=100, help="events per stream (default 100)")
    parser.add_argument("--interval-ms", type=float, default=4.0, help="between events (4)")
    parser.add_argument("--concurrency", type=int, default=4, help="streams at once (default 4)")
    parser.add_argument("--requests", type=int, default=300, help="small POSTs per path (300)")
    parser.add_argument("--burst", type=int, default=20000, help="events per burst (20000)")
    parser.add_argument("--repeat", type=int, default=3, help="bursts per path (default 3)")
    parser.add_argument("--no-engine", action="store_true", help="skip the llama-server part")
    parser.add_argument("--engine-rounds", type=int, default=20, help="chats per path (20)")
    parser.add_argument("--max-tokens", type=int, default=64, help="per chat (default 64)")
    parser.add_argument("--engine-threads", type=int, default=1, help="llama-server -t (1)")
    parser.add_argument("--uvicorn-http", default="auto", choices=["auto", "httptools", "h11"])
    args = parser.parse_args()

    import aiohttp
    import httpx
    import starlette
    import uvicorn

    http = uvicorn_http(args.uvicorn_http)
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; aiohttp {aiohttp.__version__}; "
        f"starlette {starlette.__version__} + uvicorn {uvicorn.__version__} ({http}) + "
        f"httpx {httpx.__version__}; each proxy, the upstream and this client in their own "
        f"process; paths rotated each round; baseline: direct to the upstream"
    )
    with processes(None, http) as urls:
        verdicts = asyncio.run(measure(args, urls))
    if not args.no_engine:
        config = EngineConfig(ctx=2048, slots=1, threads=args.engine_threads)
        with running_engine(config) as (engine, _, _), processes(engine, http) as urls:
            verdicts |= asyncio.run(measure_engine(args, urls))
    summary(verdicts)


if __name__ == "__main__":
    main()
