"""Serving over RPC for real: two ``homelab worker``s on 127.0.0.1 stand in for two hosts, the real
llama-server (no card here: every layer goes to the workers) spreads the real SmolLM2 over them
and answers a chat; the plan's per-worker shares and the engine's load log agree on where the
layers and their buffers went; a dead worker is a clear error naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from homelab.engine.llamacpp.log import parse_load_log
from homelab.engine.options import plan_options
from homelab.errors import ExitCode, WorkerError
from homelab.plan.calibration import records
from homelab.serve.request import ServeRequest
from homelab.serve.session import ServeSession
from tests.factory.mib import mib_matches
from tests.factory.server_log import free_port
from tests.rpc.conftest import serve_and_ask, worker_env

pytestmark = pytest.mark.engine


def test_serve_spreads_smollm2_over_two_workers_and_answers(
    two_workers, smollm2_gguf: Path, engines
) -> None:
    a, b = two_workers
    options = plan_options(ctx=512, slots=1, port=free_port(), rpc=(f"{a.endpoint},{b.endpoint}",))
    chat = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
    served = serve_and_ask(str(smollm2_gguf), options, engines, "/v1/chat/completions", chat)
    plan, argv, lines, reply = served.plan, served.argv, served.lines, served.reply
    log = parse_load_log("\n".join(lines))

    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"].strip()

    # the argv reaches both workers, in the order the plan names their devices
    assert argv[argv.index("--rpc") + 1] == f"{a.endpoint},{b.endpoint}"
    shares = {s.device.endpoint: s for s in plan.devices}
    assert set(shares) == {a.endpoint, b.endpoint}
    assert [s.device.llama_name for s in plan.devices] == ["RPC0", "RPC1"]
    assert argv[argv.index("--device") + 1] == "RPC0,RPC1"

    # every layer left the main machine, and both workers hold some: the split is real
    assert "offloaded 31/31 layers to GPU" in "\n".join(lines)
    assert all(share.n_blocks > 0 for share in plan.devices)
    # ...and each worker's buffers are the plan's bytes (model weights, its layers' KV)
    for endpoint, share in shares.items():
        weights = [b.mib for b in log.buffers if b.kind == "model" and b.worker == endpoint]
        kv = [b.mib for b in log.buffers if b.kind == "KV" and b.worker == endpoint]
        assert len(weights) == 1 and mib_matches(share.weights, weights[0]), (share, weights)
        assert len(kv) == 1 and mib_matches(share.kv, kv[0]), (share, kv)
    # a split's compute buffers are per device: none is stored as one card's measurement
    assert records() == []


def test_serve_with_a_dead_worker_exits_7_naming_it(start_worker, smollm2_gguf: Path) -> None:
    live = start_worker()
    dead = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "homelab", "serve", str(smollm2_gguf), "--no-gate"]
        + ["--ctx", "512", "--parallel", "1", "--port", str(free_port())]
        + ["--rpc", f"{live.endpoint},{dead}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=worker_env(),
    )
    assert done.returncode == ExitCode.WORKER, done.stdout + done.stderr
    assert f"RPC worker {dead} is not reachable" in done.stderr
    assert live.endpoint not in done.stderr.split("not reachable")[0].replace(dead, "")
    assert "llama-server" not in done.stdout  # nothing was started


def test_the_session_refuses_before_starting_anything(smollm2_gguf: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    session = ServeSession(
        ServeRequest(str(smollm2_gguf), plan_options(ctx=512, slots=1, rpc=(dead,)), gate=None)
    )
    try:
        with pytest.raises(WorkerError, match=dead):
            session.start()
        assert session.supervisor is None
    finally:
        session.close()
