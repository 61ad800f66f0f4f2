"""Benchmark: bytes a remote plan (``homelab plan REPO:QUANT``) fetches for a big realistic header.

Run on demand (not a test): ``python bench/bench_remote_plan.py``.

It writes the Qwen2.5-7B-shaped GGUF of ``bench_header_parse.py`` (151,936-token vocabulary
and its merges, ~450 tensor infos, a sparse 5.4 GiB data section), serves it from the Hub
stand-in on 127.0.0.1 (``tests.hubstub``: listing API, resolve with an LFS redirect to a
CDN port, Range), points ``HF_ENDPOINT`` at it with empty HF and homelab caches, and plans
``REPO:Q4_K_M`` on a synthetic 24 GiB card three ways:

- remote: nothing cached; the header is read with range requests (and stored);
- header cache: the same plan again (only the listing call goes out);
- local file: ``homelab plan PATH`` on the same file (the baseline for time).

It prints the bytes the stand-in sent for the file against the header's own size (goal
<= 1.1x) and against the whole file, the requests, and the times. Loopback has no
latency: on the real Hub each request is a round trip of tens of milliseconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_header_parse import write_model

from homelab.gguf.model_file import read_model
from homelab.gpu.report import synthetic_report
from homelab.plan.planner import PlanRequest, make_plan
from homelab.units import GiB, format_bytes
from tests.hubstub import HubStub

REPO = "bench/Qwen2.5-7B-Instruct-GGUF"
FILE = "Qwen2.5-7B-Instruct-Q4_K_M.gguf"


def _settled(hub: HubStub, timeout_s: float = 10.0) -> list:
    """The stand-in's log once it stops growing (it records a request after answering it)."""
    deadline = time.monotonic() + timeout_s
    count = -1
    while time.monotonic() < deadline and count != len(hub.requests):
        count = len(hub.requests)
        time.sleep(0.3)
    return list(hub.requests)


def _timed_plan(ref: str) -> tuple[float, object, object]:
    from homelab.hub.model_ref import resolve_model_ref

    started = time.perf_counter()
    resolved = resolve_model_ref(ref)
    plan = make_plan(resolved.model, resolved.display, synthetic_report(24 * GiB), PlanRequest())
    return time.perf_counter() - started, resolved, plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="homelab-bench-remote-") as folder:
        base = Path(folder)
        os.environ.update(
            {"HOMELAB_CACHE_DIR": str(base / "homelab-cache"), "HF_HOME": str(base / "hf")}
        )
        for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
            os.environ.pop(name, None)
        path = base / FILE
        started = time.perf_counter()
        write_model(path)
        local = read_model(path).header
        file_size = path.stat().st_size
        print(
            f"wrote {FILE} in {time.perf_counter() - started:.1f} s: header {local.header_bytes:,} B "
            f"({format_bytes(local.header_bytes)}), file {file_size:,} B ({format_bytes(file_size)}, sparse)"
        )

        started = time.perf_counter()
        with HubStub({REPO: {FILE: path}}) as hub:
            print(
                f"Hub stand-in up in {time.perf_counter() - started:.1f} s (it hashes the file once)"
            )
            os.environ["HF_ENDPOINT"] = hub.endpoint
            t_remote, _, plan = _timed_plan(f"{REPO}:Q4_K_M")
            log = _settled(hub)
            file_gets = [r for r in log if r.filename == FILE and r.method == "GET"]
            api = [r for r in log if r.path.startswith("/api/")]
            sent = sum(r.bytes_sent for r in file_gets)
            t_cached, cached, plan_cached = _timed_plan(f"{REPO}:Q4_K_M")
            later = _settled(hub)[len(log) :]

        started = time.perf_counter()
        plan_local = make_plan(
            read_model(path), str(path), synthetic_report(24 * GiB), PlanRequest()
        )
        t_local = time.perf_counter() - started

    assert plan.tokens_fit == plan_local.tokens_fit == plan_cached.tokens_fit
    cdn = [r for r in file_gets if r.host == "cdn"]
    print(
        f"remote plan         : {sent:,} B of the file in {len(cdn)} range request(s) "
        f"(+{len(file_gets) - len(cdn)} redirect), listing {sum(r.bytes_sent for r in api):,} B "
        f"in {len(api)} API call(s); {t_remote * 1000:.0f} ms"
    )
    print(f"  vs header size    : {sent / local.header_bytes:.3f}x  (goal <= 1.1x)")
    print(
        f"  vs whole file     : {sent / file_size:.5f}x  ({sent / file_size * 100:.3f} % of "
        f"{format_bytes(file_size)})"
    )
    furthest = max(int(r.range.split("-")[1]) + 1 for r in cdn)
    print(
        f"  furthest byte read: {furthest:,} (data section starts at {local.data_offset:,}: "
        f"{furthest - local.data_offset:+,} B)"
    )
    print(
        f"header-cache plan   : {sum(r.bytes_sent for r in later if r.filename == FILE):,} B of the "
        f"file, {len(later)} request(s) (the listing); {t_cached * 1000:.0f} ms "
        f"[{', '.join(p.origin for p in cached.parts)}]"
    )
    print(
        f"local-file plan     : {t_local * 1000:.0f} ms (baseline); remote {t_remote / t_local:.1f}x, "
        f"header cache {t_cached / t_local:.1f}x the local time"
    )


if __name__ == "__main__":
    main()
