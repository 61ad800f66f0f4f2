"""The prompt cache's failed copy, for real: said, not healed.

llama-server b11312 copies a slot's KV state into its host-RAM prompt cache (``--cache-ram``)
when the slot is taken by a different prompt (tools/server/server-context.cpp, the LRU pick:
``prompt_save``). Under an engine memory limit (RLIMIT_AS) that holds the engine and its
first long prompt but not that copy, the copy's allocation fails for real ("failed to
allocate memory for prompt cache state: std::bad_alloc"), the engine drops its cache and
answers the request anyway. The session says so (``PromptCacheOff``, and ``homelab serve``'s
line) and restarts nothing: the plan was not wrong, only the cache was too big for the limit,
which is why a limit set without a ``cache_ram`` sizes the cache to fit (``test_cache_ram``).

The cap is measured, never typed in: the same command line uncapped (one malloc arena, which
the engine inherits) is read at VmPeak after the long prompt and after the copy, and the
cap is put halfway. Real llama-server, real SmolLM2, real requests; nothing edited.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from homelab.cli.serve_cmd import ServeText
from homelab.engine.kinds import engine_kind
from homelab.engine.loopback import loopback_client
from homelab.engine.options import plan_options
from homelab.engine.supervision.states import State
from homelab.plan.options import PlanOptions
from homelab.serve import events as ev
from homelab.serve.prove import proof_prompt
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.factory.server_log import free_port
from tests.prove.lazy_memory import FAST, ONE_ARENA, RAM, vm_peak, wait_health

pytestmark = pytest.mark.engine

LONG_PROMPT = 1500
"""Tokens of the first prompt: its saved state (f16 KV, SmolLM2: 23,040 B a token) is ~33 MiB."""


def _options(limit: int | None = None) -> PlanOptions:
    """One slot of 4,096 tokens, f16 KV, a 1 GiB prompt cache set explicitly (so the
    capped and the uncapped command lines are the same, the cap being the spawn's)."""
    return plan_options(
        slots=1,
        ctx=4096,
        cache_type_k="f16",
        cache_type_v="f16",
        cache_ram=1 << 30,
        engine_memory_limit=limit,
        prove=False,
        port=free_port(),
    )


def _long(client: httpx.Client) -> httpx.Response:
    prompt = proof_prompt(client, LONG_PROMPT)
    return client.post("/completion", json={"prompt": prompt, "n_predict": 2})


def _other(client: httpx.Client) -> httpx.Response:
    """A different prompt: the only slot is taken from the long one, whose state is copied."""
    return client.post("/completion", json={"prompt": "Name three colours.", "n_predict": 4})


def _measure(model: Path) -> tuple[int, int]:
    """VmPeak of the uncapped engine after the long prompt, and after the copy."""
    kind = engine_kind("llama.cpp")
    plan = kind.plan(str(model), RAM, _options())
    port = free_port()
    argv = kind.argv(plan, port, kind.executable())
    assert argv[argv.index("--cache-ram") + 1] == "1024"
    env = {**os.environ, **ONE_ARENA}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with loopback_client(f"http://127.0.0.1:{port}", timeout_s=180) as client:
            wait_health(client, proc)
            assert _long(client).status_code == 200
            after_long = vm_peak(proc.pid)
            assert _other(client).status_code == 200
            after_copy = vm_peak(proc.pid)
    finally:
        proc.kill()
        proc.wait(30)
    return after_long, after_copy


def test_a_prompt_cache_copy_that_cannot_allocate_is_said_and_restarts_nothing(
    smollm2_gguf: Path, engines, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    for name, value in ONE_ARENA.items():
        monkeypatch.setenv(name, value)
    after_long, after_copy = _measure(smollm2_gguf)
    assert after_copy - after_long > 16 << 20, (after_long, after_copy)  # the copy is real
    cap = (after_long + after_copy) // 2 >> 20 << 20

    session = ServeSession(
        ServeRequest(str(smollm2_gguf), _options(cap), report=RAM, start_timeout_s=120),
        policy=FAST,
    )
    seen: list = []
    session.subscribe(seen.append)
    session.subscribe(ServeText())  # what `homelab serve` prints of these events
    untrack = session.subscribe(
        lambda e: engines.track(e.transition.pid) if isinstance(e, ev.EngineChanged) else None
    )
    try:
        session.start()
        session.wait_ready()
        supervisor = session.supervisor
        assert supervisor is not None and supervisor.url is not None
        first = supervisor.events[-1].attempt
        with loopback_client(supervisor.url, timeout_s=180) as client:
            assert _long(client).status_code == 200, "the long prompt did not hold under the cap"
            answered = _other(client)  # its copy of the long prompt's state cannot allocate
            assert answered.status_code == 200, answered.text[:300]  # served on regardless
        deadline = time.monotonic() + 30
        while not any(isinstance(e, ev.PromptCacheOff) for e in seen):
            assert time.monotonic() < deadline, "no PromptCacheOff after the failed copy"
            time.sleep(0.1)
        off = next(e for e in seen if isinstance(e, ev.PromptCacheOff))
        assert "failed to allocate memory for prompt cache state" in off.said
        assert off.cache_ram == 1024
        time.sleep(1.0)  # a restart, were one coming, is asked for at once
        assert not [e for e in seen if isinstance(e, (ev.Healing, ev.Healed))]
        last = supervisor.events[-1]
        assert last.state is State.READY and last.attempt == first  # nothing restarted
        assert State.CRASHED not in [t.state for t in supervisor.events]
    finally:
        session.stop(let_go=False)
        untrack()
        session.close()
    out = capsys.readouterr().out
    assert "the engine's prompt cache ran out of memory and is off" in out
    assert "nothing restarts" in out and "healing" not in out
