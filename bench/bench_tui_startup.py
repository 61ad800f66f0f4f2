"""TUI start-up and idle cost: ``homelab`` to first frame, and idle CPU with the 1 s refresh.

Runs ``python -m homelab`` (this checkout) in a private tmux server at 140x45:
- first frame: from launching the process to the pane first showing the models panel
  (polled every 10 ms; includes Python start-up and tmux's own latency). Goal < 1 s.
- idle CPU: the process's user+system CPU time over 30 s of doing nothing but the
  once-a-second card refresh, as % of one core. Goal < 2 %.

    PYTHONPATH=$PWD python3 bench/bench_tui_startup.py [--gpu-snapshot FILE] [--idle-s 30] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil


def tmux(socket: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30, check=True
    ).stdout


def launch(socket: str, snapshot: Path) -> float:
    """Start homelab in a fresh tmux server; seconds until the first frame shows."""
    command = f"env -u COLUMNS -u LINES PYTHONPATH={REPO} {sys.executable} -m homelab --gpu-snapshot {snapshot}"
    start = time.perf_counter()
    tmux(socket, "new-session", "-d", "-s", "b", "-x", "140", "-y", "45", command)
    while True:
        if "models" in tmux(socket, "capture-pane", "-p", "-t", "b"):
            return time.perf_counter() - start
        if time.perf_counter() - start > 30:
            raise SystemExit("no frame within 30 s")
        time.sleep(0.01)


def homelab_process(socket: str) -> psutil.Process:
    pane_pid = int(tmux(socket, "display", "-p", "-t", "b", "#{pane_pid}").strip())
    shell = psutil.Process(pane_pid)
    for proc in [shell, *shell.children(recursive=True)]:
        if "homelab" in " ".join(proc.cmdline()):
            return proc
    raise SystemExit("homelab process not found")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--gpu-snapshot", type=Path, default=REPO / "tests/fixtures/gpu/rtx3090_wayland.json"
    )
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    baseline = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import textual.app"], check=True)
        baseline.append(time.perf_counter() - start)
    print(
        f"baseline, same run: `python -c 'import textual.app'` median "
        f"{statistics.median(baseline):.3f} s (the floor any Textual app pays)"
    )
    frames = []
    for _ in range(args.runs):
        socket = f"bench-{uuid.uuid4().hex[:8]}"
        try:
            frames.append(launch(socket, args.gpu_snapshot))
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    print(
        f"first frame: median {statistics.median(frames):.3f} s, min {min(frames):.3f} s, "
        f"max {max(frames):.3f} s over {len(frames)} runs (goal < 1 s); "
        f"{statistics.median(frames) / statistics.median(baseline):.1f}x the baseline"
    )

    socket = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        launch(socket, args.gpu_snapshot)
        proc = homelab_process(socket)
        time.sleep(3.0)  # let the first probe, listing and verdicts finish
        before = proc.cpu_times()
        t0 = time.perf_counter()
        time.sleep(args.idle_s)
        after = proc.cpu_times()
        wall = time.perf_counter() - t0
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
    used = (after.user - before.user) + (after.system - before.system)
    print(
        f"idle CPU with the 1 s refresh: {100 * used / wall:.2f} % of one core "
        f"over {wall:.0f} s (goal < 2 %)"
    )


if __name__ == "__main__":
    main()
