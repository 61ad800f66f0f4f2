"""The lazy allocation the proof and run-time heal tests make fail, measured for the cap.

llama.cpp's CPU backend grows its graph work buffer (``work_data``) on the first batch whose
graph needs more: with flash attention off, ``softmax(KQ)`` (``n_kv × n_ubatch × heads``
f32) is converted to the V cache's type (f16) in that buffer, so the first batch that fills
a slot at full micro-batch allocates ~``9 × 1024 × 1024 × 2`` B = 19 MiB more than the
engine held at ready (SmolLM2: 9 heads). Under an address-space cap that lies between the
two, the engine loads and answers ``/health``, and that batch fails: HTTP 500 ``decode()
failed: std::bad_alloc``. The tests find the cap by measuring the plan's own engine
uncapped (/proc/PID/status ``VmPeak`` at ready and after the batch), never a figure typed in.

Measured here (b11312 CPU build, 2 slots × 1,024 tokens, ``-ub 1024``, f16 KV, ``-fa off``,
``MALLOC_ARENA_MAX=1``): 359 MiB at ready, 378 MiB after the batch, the same in each run;
one slot × 1,024 tokens after its batch: 347 MiB. ``MALLOC_ARENA_MAX=1``: glibc reserves
64 MiB of address space for each malloc arena a new thread opens, which made VmSize vary by
one arena more or less between runs (648-743 MiB for the same plan); with one arena the
address space is the same in every run, so a cap between two measured figures holds.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from homelab.engine.kinds import ServePlan, engine_kind
from homelab.engine.loopback import loopback_client
from homelab.engine.options import plan_options
from homelab.engine.supervision.states import RestartPolicy
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.options import PlanOptions
from homelab.serve.prove import MARGIN_TOKENS, N_PREDICT, largest_slot, proof_prompt
from tests.factory.server_log import free_port

RAM = GpuReport(
    source="cpu",
    devices=(),
    cpu=CpuMemory(total=16 << 30, available=16 << 30),
    note="a fixed 16 GiB of RAM (the test's card)",
)
ONE_ARENA = {"MALLOC_ARENA_MAX": "1"}
FAST = RestartPolicy(max_crashes=8, window_s=600, backoff_first_s=0.1, backoff_max_s=0.4)
PROVISIONAL_LIMIT = 256 << 20
"""The limit the measured plan is planned under: any cap this small gives it the same
command line (``--cache-ram 0``) as the capped run's."""


def options(limit: int | None = None, **more) -> PlanOptions:
    """Two slots of 1,024 tokens, full micro-batch, f16 KV, flash attention off."""
    fields = {
        "slots": 2,
        "ctx": 2 * 1024,
        "ubatch": 1024,
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "flash_attn": False,
        "engine_memory_limit": limit or PROVISIONAL_LIMIT,
        "port": free_port(),
    }
    return plan_options(**{**fields, **more})


@dataclass(frozen=True)
class Lazy:
    """One plan's engine, uncapped: its address space at ready and after a full-slot batch."""

    at_ready: int
    after_batch: int
    argv: tuple[str, ...]

    @property
    def cap(self) -> int:
        """Halfway: room to load, none for the batch's work buffer."""
        return (self.at_ready + self.after_batch) // 2 >> 20 << 20


def vm_peak(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmPeak in /proc/{pid}/status")


def full_slot_body(client: httpx.Client) -> dict:
    """The proof's request: the largest slot filled to its context, no prompt cache."""
    slot, n_ctx = largest_slot(client)
    prompt = proof_prompt(client, n_ctx - MARGIN_TOKENS - N_PREDICT)
    return {"prompt": prompt, "n_predict": N_PREDICT, "id_slot": slot, "cache_prompt": False}


def wait_health(client: httpx.Client, proc: subprocess.Popen) -> None:
    """Until the uncapped engine ``proc`` answers ``/health`` (at most 120 s)."""
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, f"the uncapped engine exited: {proc.args}"
        assert time.monotonic() < deadline, "the uncapped engine was not ready in 120 s"
        try:
            if client.get("/health").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


def measure(model: Path) -> Lazy:
    """Run the plan of :func:`options` uncapped once (one malloc arena) and read its VmPeak."""
    kind = engine_kind("llama.cpp")
    plan: ServePlan = kind.plan(str(model), RAM, options())
    port = free_port()
    argv = kind.argv(plan, port, kind.executable())
    env = {**os.environ, **ONE_ARENA}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        with loopback_client(url, timeout_s=180) as client:
            wait_health(client, proc)
            at_ready = vm_peak(proc.pid)
            answer = client.post("/completion", json=full_slot_body(client))
            assert answer.status_code == 200, answer.text[:300]
            after = vm_peak(proc.pid)
    finally:
        proc.kill()
        proc.wait(30)
    return Lazy(at_ready, after, tuple(argv))


def serve_ready(request, engines, policy=None):
    """Serve ``request`` until ready (or failed), then stop it: (the session, its events)."""
    from homelab.serve import events as ev
    from homelab.serve.session import ServeSession

    session = ServeSession(request, policy=policy or FAST)
    seen: list = []
    session.subscribe(seen.append)
    track = session.subscribe(
        lambda e: engines.track(e.transition.pid) if isinstance(e, ev.EngineChanged) else None
    )
    try:
        session.start()
        session.wait_ready()
    finally:
        session.stop(let_go=False)
        track()
        session.close()
    return session, seen
