"""Serving one case for bench/gpu_check.py: homelab run as a person runs it.

``homelab_env`` gives each case its own state/config/cache folders (no calibration from an
earlier case); ``write_model`` writes a factory GGUF once; ``plan_case`` plans in this process
exactly as ``homelab plan`` does; :class:`Serve` runs ``python -m homelab serve`` in its own
session and reads its output (the engine's pid and log, ready, the predicted-vs-actual table);
``engine_log`` is the engine's own output from homelab's session log.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _gpu_cases import Case, Model

ROOT = Path(__file__).resolve().parent.parent
_PID_LOG = re.compile(r"^pid (\d+), log (.+)$")
_MARKER = "---- homelab "


def homelab_env(state: Path) -> dict[str, str]:
    """The environment for homelab subprocesses: this repo first, its own folders."""
    env = dict(os.environ)
    for kind in ("state", "config", "cache"):
        env[f"HOMELAB_{kind.upper()}_DIR"] = str(state / kind)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    env["PYTHONUNBUFFERED"] = "1"
    return env


def homelab(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m homelab ARGS`` to completion (output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "homelab", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_model(model: Model, workdir: Path) -> tuple[Path, float]:
    """The model's GGUF in ``workdir`` (written once); (path, seconds spent writing)."""
    from tests.factory import write_gguf

    path = workdir / "models" / f"{model.label}.gguf"
    if path.exists():
        return path, 0.0
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    partial = path.with_suffix(".partial")
    write_gguf(model.arch, partial, **model.geometry)
    partial.rename(path)
    return path, time.monotonic() - started


def write_models(cases: tuple[Case, ...], workdir: Path) -> int:
    """Write every model the cases serve (the script runs this while llama-server builds)."""
    for model in {case.model.label: case.model for case in cases}.values():
        path, seconds = write_model(model, workdir)
        print(f"model {path.name}: {path.stat().st_size / 2**20:.0f} MiB in {seconds:.1f} s")
    return 0


def plan_case(model_path: Path, case: Case, env: dict[str, str]) -> tuple[Any, list[str]]:
    """The plan ``homelab plan MODEL FLAGS`` makes, in this process, with ``env``'s homelab
    settings (its folders, its llama-server)."""
    from homelab.cli import build_parser
    from homelab.cli.plan_cmd import prepared_from_args

    for key, value in env.items():
        if key.startswith("HOMELAB_"):
            os.environ[key] = value
    args = build_parser().parse_args(
        ["plan", str(model_path), *case.serve_flags(), "--sample-seconds", "0.5"]
    )
    prepared = prepared_from_args(args)
    return prepared.plan.plan, list(prepared.argv)


class Serve:
    """``homelab serve`` in its own session, its output read by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str], pid_file: Path | None = None) -> None:
        self.pid_file = pid_file
        """Where the serve's and the engine's pids are kept while they run (for a later run)."""
        self.lines: list[str] = []
        self.url: str | None = None
        self.pid: int | None = None
        self.log_path: Path | None = None
        self.ready = threading.Event()
        self.actuals_done = threading.Event()
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.rstrip("\n")
            self.lines.append(line)
            if found := _PID_LOG.match(line):
                self.pid, self.log_path = int(found[1]), Path(found[2])
                if self.pid_file is not None:
                    self.pid_file.write_text(f"{self.proc.pid} {self.pid}\n")
            elif line.startswith("ready: "):
                self.url = line.split()[1]
                self.ready.set()
            elif line.startswith(("recorded the measured", "calibration not recorded")):
                self.actuals_done.set()
        self.ready.set()
        self.actuals_done.set()

    def wait(self, timeout: float) -> bool:
        """True once ready (and its table printed, or 10 s after ready); False on exit/timeout."""
        if not self.ready.wait(timeout) or self.proc.poll() is not None:
            return False
        self.actuals_done.wait(10.0)
        return self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM (serve's clean stop), then SIGKILL to its process group; the engine too."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.pid is not None:
            kill_if_engine(self.pid)
        self._reader.join(timeout=5)
        return self.proc.returncode


def kill_if_engine(pid: int) -> bool:
    """SIGKILL ``pid`` when it is still a llama-server or a ``homelab serve`` (a run cut short
    leaves them: serve runs in its own session); True when one was killed."""
    import psutil

    try:
        process = psutil.Process(pid)
        argv = process.cmdline()
        engine = bool(argv) and Path(argv[0]).name == "llama-server"
        if not engine and not ("homelab" in argv and "serve" in argv):
            return False
        process.kill()
        return True
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def engine_log(path: Path | None) -> str:
    """The engine's own output from the session log (homelab's attempt markers left out)."""
    if path is None or not path.exists():
        return ""
    text = path.read_text("utf-8", errors="replace")
    return "".join(line for line in text.splitlines(True) if not line.startswith(_MARKER))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_request(url: str | None, timeout_s: float = 30.0) -> float | None:
    """One short completion (what a first user sends: lazy buffers grow here); its seconds,
    or None when there is no URL or it failed."""
    import httpx

    if url is None:
        return None
    started = time.monotonic()
    try:
        answer = httpx.post(
            f"{url}/completion",
            json={"prompt": "The card holds", "n_predict": 8},
            timeout=timeout_s,
        )
    except httpx.HTTPError:
        return None
    return round(time.monotonic() - started, 2) if answer.status_code == 200 else None
