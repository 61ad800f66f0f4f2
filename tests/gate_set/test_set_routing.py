"""A set of three real models behind one gate, memory for two at once: every request is
answered by the model it named, none lost, swaps counted, an in-flight request never cut."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.gate_set.conftest import TIMEOUT_S, chat, metric

pytestmark = pytest.mark.engine

GIB = 2**30
COSTS = {"smol": GIB, "llama": GIB, "qwen3": GIB}
TWO = 2 * GIB + GIB // 2
"""Room for two of the three."""


def _props_model(url: str, name: str) -> str:
    r = httpx.get(f"{url}/props", params={"model": name}, timeout=TIMEOUT_S, trust_env=False)
    assert r.status_code == 200, r.text
    return Path(r.json()["model_path"]).name


def test_concurrent_clients_naming_three_models_each_get_the_model_named(
    set_gate, three_models: dict[str, Path]
) -> None:
    under = set_gate(three_models, COSTS, TWO, ["smol", "llama"])
    loaded_most = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal loaded_most
        while not done.is_set():
            loaded_most = max(loaded_most, len(under.engines.running))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    names = ["smol", "llama", "qwen3"] * 4
    try:
        with ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda n: (n, chat(under.url, n)), names))
    finally:
        done.set()
        watcher.join()
    for name, response in answers:
        assert response.status_code == 200, (name, response.text)
        assert response.json()["model"] == name  # the engine's own field (its --alias)
    assert len(answers) == len(names)
    assert loaded_most <= 2  # never three engines at once: the budget holds two
    assert metric(under.url, "homelab_gate_model_swaps_total") >= 1
    assert metric(under.url, "homelab_gate_model_unloads_total") >= 1
    for name, path in three_models.items():  # /props of the model named: its own file
        assert _props_model(under.url, name) == path.name
    listed = httpx.get(f"{under.url}/v1/models", timeout=30, trust_env=False).json()["data"]
    assert [m["id"] for m in listed] == ["smol", "llama", "qwen3"]
    assert sum(m["loaded"] for m in listed) == 2


def test_an_eviction_drains_the_request_in_flight_first(
    set_gate, three_models: dict[str, Path]
) -> None:
    """``smol`` streams; ``qwen3`` needs both residents gone: the idle ``llama`` goes at once,
    ``smol`` only once its stream is whole."""
    costs = {"smol": 2 * GIB, "llama": GIB, "qwen3": 2 * GIB}
    under = set_gate(three_models, costs, 3 * GIB, ["smol", "llama"])
    body = {
        "model": "smol",
        "messages": [{"role": "user", "content": "Count slowly to one thousand."}],
        "max_tokens": 120,
        "ignore_eos": True,
        "stream": True,
    }
    events: list[str] = []
    with httpx.Client(base_url=under.url, timeout=TIMEOUT_S, trust_env=False) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as stream:
            lines = stream.iter_lines()
            first = next(line for line in lines if line.startswith("data:"))
            assert first
            other = ThreadPoolExecutor(1).submit(chat, under.url, "qwen3")
            events.extend(line for line in lines if line.startswith("data:"))
    assert events[-1] == "data: [DONE]"  # whole: never cut by the eviction
    tokens = sum(1 for e in events if '"content"' in e)
    assert tokens >= 100
    answer = other.result(TIMEOUT_S)
    assert answer.status_code == 200 and answer.json()["model"] == "qwen3"
    assert metric(under.url, "homelab_gate_upstream_errors_total") == 0
    states = {m["id"]: m["state"] for m in under.pool.models_json()}
    assert states == {"smol": "unloaded", "llama": "unloaded", "qwen3": "loaded"}


def test_aliases_and_no_model_route_and_unknown_names_are_404_listing_the_ids(
    set_gate, three_models: dict[str, Path]
) -> None:
    paths = {k: three_models[k] for k in ("smol", "llama")}
    aliases = {"smol": ("claude-haiku-*",)}
    under = set_gate(paths, COSTS, TWO, ["smol", "llama"], aliases=aliases)
    assert chat(under.url, "claude-haiku-4-5-20251001").json()["model"] == "smol"
    assert chat(under.url, None).json()["model"] == "smol"  # none named: the first listed
    for name in (
        "../../etc/passwd",
        "/root/.ssh/id_rsa",
        "smol/../llama",
        "x" * 200_000,
        "SMOL\x00",
    ):
        r = chat(under.url, name)
        assert r.status_code == 404, r.text[:200]
        error = r.json()["error"]
        assert error["code"] == "model_not_found"
        assert "smol, llama" in error["message"] and len(error["message"]) < 400
    r = httpx.post(
        f"{under.url}/v1/messages",
        json={"model": "../x", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
        timeout=TIMEOUT_S,
        trust_env=False,
    )
    assert r.status_code == 404 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "not_found_error"
    r = chat(under.url, 7)  # type: ignore[arg-type]
    assert r.status_code == 400


def test_a_model_that_fails_to_load_answers_its_requests_with_why_and_others_still_serve(
    set_gate, three_models: dict[str, Path], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 64)
    paths = {"smol": three_models["smol"], "broken": broken}
    under = set_gate(paths, {"smol": GIB, "broken": GIB}, TWO, ["smol"])
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda n: chat(under.url, n), ["broken", "broken", "smol"]))
    for r in answers[:2]:
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "model_load_failed"
        assert "broken" in r.json()["error"]["message"]
        assert r.headers["Retry-After"]
    assert answers[2].status_code == 200 and answers[2].json()["model"] == "smol"
    assert metric(under.url, "homelab_gate_model_load_failures_total") >= 1
    assert chat(under.url, "smol").status_code == 200


def test_clients_thrashing_between_models_are_bounded_and_answered(
    set_gate, three_models: dict[str, Path]
) -> None:
    """Room for one at a time, two models named alternately by many clients: swaps one at a
    time, every request answered (served, or 429/503 with Retry-After), no wrong model."""
    paths = {k: three_models[k] for k in ("smol", "llama")}
    under = set_gate(paths, COSTS, GIB + GIB // 2, ["smol"], max_queue=3, queue_timeout_s=60)
    names = ["smol", "llama"] * 8
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda n: (n, chat(under.url, n)), names))
    served = 0
    for name, r in answers:
        if r.status_code == 200:
            served += 1
            assert r.json()["model"] == name
        else:
            assert r.status_code in (429, 503), r.text
            assert int(r.headers["Retry-After"]) >= 1
    assert served >= 2
    assert len(under.engines.running) <= 1
    swaps = metric(under.url, "homelab_gate_model_swaps_total")
    assert 1 <= swaps <= len(names)


def test_idle_models_unload_after_the_ttl_and_load_again_when_named(
    set_gate, three_models: dict[str, Path]
) -> None:
    paths = {k: three_models[k] for k in ("smol", "llama")}
    under = set_gate(paths, COSTS, TWO, ["smol", "llama"], idle_ttl_s=0.5)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(m["state"] == "unloaded" for m in under.pool.models_json()):
            break
        time.sleep(0.1)
    assert not under.engines.running
    assert metric(under.url, "homelab_gate_model_unloads_total") == 2
    r = chat(under.url, "llama")
    assert r.status_code == 200 and r.json()["model"] == "llama"
    assert metric(under.url, "homelab_gate_model_swaps_total") == 1


def test_each_engine_of_the_set_has_its_own_key_and_one_killed_is_restarted(
    set_gate, three_models: dict[str, Path]
) -> None:
    """Nobody goes around the gate to a set's engine (401 without its key); an engine killed
    (SIGKILL) is restarted by its supervisor and its next request answered by it."""
    import os
    import signal

    paths = {k: three_models[k] for k in ("smol", "llama")}
    under = set_gate(paths, COSTS, TWO, ["smol", "llama"])
    for supervisor in under.engines.running.values():
        assert supervisor.url is not None
        bare = httpx.get(f"{supervisor.url}/v1/models", timeout=30, trust_env=False)
        assert bare.status_code == 401
    victim = under.engines.running["llama"]
    pid = victim.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    r = chat(under.url, "llama")
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "llama"
    assert victim.pid != pid
    assert chat(under.url, "smol").json()["model"] == "smol"
