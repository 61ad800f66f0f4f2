"""TUI start-up and idle cost: ``homelab`` to first frame, and idle CPU with the GPU
telemetry poller refreshing the card every second, side by side with ``mdl tui``.

Each app runs as a real process in its own private tmux server at 140x45:

- baseline for start-up, same run: ``python -c 'import textual.app'`` (the floor any
  Textual app pays); first frame: from launching the process to the pane first showing
  the models panel (polled every 10 ms; includes Python start-up and tmux's own latency),
  for homelab and, where it is installed, for ``mdl tui``. Goal < 1 s.
- idle CPU: both apps started, left alone for a warm-up, then the user+system CPU time
  of each process (and of children it waited for) over the *same* window, as % of one
  core. The named baseline is ``mdl tui`` (llama-mdl 0.14, a Textual dashboard) with an
  empty config, measured in that window; homelab's ratio against it is printed. Goal
  for homelab < 2 % of one core.

The telemetry poller must be running all through the window. A recorded snapshot plays
its samples at their recorded times and then ends (the Wayland 3090 one holds 8 samples
over 1.75 s), so homelab is given that recording *re-timed*: the same 8 samples, cycled,
one a second, for longer than the run (written to a temporary file; the values are the
recording's, only the times change). The card then really changes every second (the
desktop and Firefox grow and shrink), so each second is a real redraw, and the bench
counts the distinct screens it saw in the window to show the poller was live.

    PYTHONPATH=$PWD python3 bench/bench_tui_startup.py [--gpu-snapshot FILE] [--idle-s 30]
        [--runs 5] [--mdl /work/venvs/mdl/bin/mdl]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil

from homelab.gpu.snapshot import is_series

SIZE = ("140", "45")
WARM_UP_S = 5.0
DEFAULT_MDL = Path("/work/venvs/mdl/bin/mdl")


def tmux(socket: str, *args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30, check=True
    ).stdout


def launch(socket: str, command: str, marker: str = "models") -> float:
    """Start ``command`` in a fresh tmux server; seconds until ``marker`` shows on the pane."""
    start = time.perf_counter()
    tmux(socket, "new-session", "-d", "-s", "b", "-x", SIZE[0], "-y", SIZE[1], command)
    while True:
        if marker in tmux(socket, "capture-pane", "-p", "-t", "b"):
            return time.perf_counter() - start
        if time.perf_counter() - start > 30:
            raise SystemExit(f"no frame within 30 s from: {command}")
        time.sleep(0.01)


def kill(socket: str) -> None:
    subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def app_process(socket: str, word: str) -> psutil.Process:
    """The process in the pane whose command line names ``word`` (not the shell)."""
    pane_pid = int(tmux(socket, "display", "-p", "-t", "b", "#{pane_pid}").strip())
    shell = psutil.Process(pane_pid)
    for proc in [*shell.children(recursive=True), shell]:
        if word in " ".join(proc.cmdline()) and "env" not in proc.name():
            return proc
    raise SystemExit(f"no {word} process in the pane")


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def retimed(snapshot: Path, seconds: float, out: Path) -> Path:
    """``snapshot``'s samples cycled one a second for ``seconds`` (see the module docstring)."""
    data: dict[str, Any] = json.loads(snapshot.read_text())
    n = int(seconds) + 1
    for device in data.get("devices", []):
        for key in ("memory_v2", "memory_v1"):
            series = device.get(key)
            if isinstance(series, list) and series:
                device[key] = [
                    {**entry, "t": float(k)} if isinstance(entry, dict) else entry
                    for k, entry in zip(range(n), itertools.cycle(series), strict=False)
                ]
        for key in ("graphics_procs", "compute_procs"):
            procs = device.get(key)
            if isinstance(procs, list) and is_series(procs):
                device[key] = [p for _, p in zip(range(n), itertools.cycle(procs), strict=False)]
    data["comment"] = (
        f"{data.get('comment', '')} [bench: these samples cycled one a second for {n} s]"
    )
    out.write_text(json.dumps(data))
    return out


def homelab_command(snapshot: Path) -> str:
    return (
        f"env -u COLUMNS -u LINES PYTHONPATH={REPO} {sys.executable} -m homelab "
        f"--gpu-snapshot {snapshot}"
    )


def mdl_command(mdl: Path, home: Path) -> str:
    """``mdl tui`` with an empty config of its own (HOME and the XDG folders in ``home``)."""
    xdg = " ".join(
        f"XDG_{kind}_HOME={home / sub}"
        for kind, sub in (
            ("CONFIG", ".config"),
            ("DATA", ".local/share"),
            ("STATE", ".local/state"),
            ("CACHE", ".cache"),
        )
    )
    return f"env -u COLUMNS -u LINES HOME={home} {xdg} {mdl} tui"


def first_frames(command: str, runs: int) -> list[float]:
    frames = []
    for _ in range(runs):
        socket = f"bench-{uuid.uuid4().hex[:8]}"
        try:
            frames.append(launch(socket, command))
        finally:
            kill(socket)
    return frames


def idle_window(apps: dict[str, tuple[str, str]], idle_s: float) -> tuple[dict[str, float], int]:
    """Start every app, warm up, then % of one core each over one shared window; and how
    many distinct screens homelab's pane showed in it (sampled once a second)."""
    sockets = {name: f"bench-{uuid.uuid4().hex[:8]}" for name in apps}
    try:
        procs = {}
        for name, (command, word) in apps.items():
            launch(sockets[name], command)
            procs[name] = app_process(sockets[name], word)
        time.sleep(WARM_UP_S)  # the first probe, listing and verdicts finish
        before = {name: cpu_seconds(proc) for name, proc in procs.items()}
        t0 = time.perf_counter()
        screens = set()
        while time.perf_counter() - t0 < idle_s:
            screens.add(tmux(sockets["homelab"], "capture-pane", "-p", "-t", "b"))
            time.sleep(1.0)
        after = {name: cpu_seconds(proc) for name, proc in procs.items()}
        wall = time.perf_counter() - t0
    finally:
        for socket in sockets.values():
            kill(socket)
    return {name: 100 * (after[name] - before[name]) / wall for name in apps}, len(screens)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--gpu-snapshot", type=Path, default=REPO / "tests/fixtures/gpu/rtx3090_wayland.json"
    )
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--mdl", type=Path, default=DEFAULT_MDL, help="the mdl binary")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    mdl = args.mdl if args.mdl.exists() else shutil.which("mdl")
    if mdl is None:
        print(f"mdl not found ({args.mdl}, nor on PATH): homelab alone")

    with tempfile.TemporaryDirectory(prefix="bench-tui-") as tmp:
        scratch = Path(tmp)
        baseline = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import textual.app"], check=True)
            baseline.append(time.perf_counter() - start)
        base = statistics.median(baseline)
        print(
            f"baseline, same run: `python -c 'import textual.app'` median {base:.3f} s "
            "(the floor any Textual app pays)"
        )
        live = retimed(args.gpu_snapshot, WARM_UP_S + args.idle_s + 60, scratch / "live.json")
        home = scratch / "mdl-home"
        home.mkdir()
        commands = {"homelab": (homelab_command(live), "homelab")}
        if mdl is not None:
            commands["mdl tui"] = (mdl_command(Path(mdl), home), "mdl")
        for name, (command, _) in commands.items():
            frames = first_frames(command, args.runs)
            median = statistics.median(frames)
            print(
                f"first frame, {name:8}: median {median:.3f} s, min {min(frames):.3f} s, "
                f"max {max(frames):.3f} s over {len(frames)} runs; {median / base:.1f}x the "
                "baseline" + (" (goal < 1 s)" if name == "homelab" else "")
            )
        idle, screens = idle_window(commands, args.idle_s)
    print(
        f"idle CPU over the same {args.idle_s:.0f} s window, as % of one core "
        f"(homelab: GPU telemetry poller live, 1 s refresh, {screens} distinct screens seen):"
    )
    for name, percent in idle.items():
        print(f"  {name:8} {percent:5.2f} %" + ("  (goal < 2 %)" if name == "homelab" else ""))
    if "mdl tui" in idle and idle["mdl tui"] > 0:
        print(f"  homelab / mdl tui: {idle['homelab'] / idle['mdl tui']:.2f}x")


if __name__ == "__main__":
    main()
