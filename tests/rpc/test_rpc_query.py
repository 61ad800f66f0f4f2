"""Asking real workers what they offer: bytes in the RPC protocol, named as llama-server names them."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from homelab.engine.llamacpp.rpc_protocol import RpcConnection
from homelab.engine.llamacpp.rpc_query import query_workers
from homelab.errors import ExitCode, WorkerError
from tests.factory.server_log import free_port
from tests.rpc.conftest import worker_env

MIB = 1 << 20
_LISTED = re.compile(r"^\s+(\S+): (\S+) \((\d+) MiB, (\d+) MiB free\)$")


def list_devices(llama_server: Path, endpoints: list[str]) -> list[tuple[str, str, int, int]]:
    """``llama-server --rpc ... --list-devices``: (name, description, total MiB, free MiB)."""
    done = subprocess.run(
        [str(llama_server), "--rpc", ",".join(endpoints), "--list-devices"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = [m.groups() for line in done.stdout.splitlines() if (m := _LISTED.match(line))]
    return [(n, d, int(t), int(f)) for n, d, t, f in found]


def test_two_workers_are_named_and_sized_as_llama_server_lists_them(
    two_workers, llama_server_bin: Path
) -> None:
    a, b = two_workers
    devices = query_workers([a.endpoint, b.endpoint])
    listed = list_devices(llama_server_bin, [a.endpoint, b.endpoint])
    assert [(d.name, d.endpoint) for d in devices] == [(n, e) for n, e, _, _ in listed]
    assert [d.name for d in devices] == ["RPC0", "RPC1"]
    for device, (_, _, total_mib, free_mib) in zip(devices, listed, strict=True):
        assert device.total // MIB == total_mib  # the same figure, to the byte here
        assert 0 < device.free <= device.total
        assert abs(device.free // MIB - free_mib) < 1024  # free RAM moves between the two asks
    again = query_workers([b.endpoint, a.endpoint])  # the order of --rpc decides the names
    assert [(d.name, d.endpoint) for d in again] == [("RPC0", b.endpoint), ("RPC1", a.endpoint)]


def test_a_dead_worker_is_a_clear_error_naming_it() -> None:
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(WorkerError) as error:
        query_workers([dead], timeout_s=2.0)
    assert dead in error.value.message and "not reachable" in error.value.message
    assert "homelab worker" in (error.value.hint or "")
    assert error.value.exit_code == ExitCode.WORKER == 7


def test_a_busy_worker_does_not_answer_and_says_why(start_worker) -> None:
    worker = start_worker()
    host, port = worker.endpoint.split(":")
    with RpcConnection(host, int(port), timeout_s=5.0) as holder:  # another client holds it
        assert holder.open().compatible
        with pytest.raises(WorkerError) as error:
            query_workers([worker.endpoint], timeout_s=1.0)
    assert worker.endpoint in error.value.message
    assert "one client at a time" in error.value.message
    assert query_workers([worker.endpoint])[0].total > 0  # answers again once it is free
    # the timed-out client had left before rpc-server answered it: that write must not kill
    # the worker (SIGPIPE), so the same rpc-server serves on
    assert len(worker.server_pids) == 1 and not any("crashed" in x for x in worker.lines)


def test_something_else_on_the_port_is_not_taken_for_a_worker() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        endpoint = f"127.0.0.1:{server.getsockname()[1]}"

        def answer_like_http() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(64)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        thread = threading.Thread(target=answer_like_http, daemon=True)
        thread.start()
        with pytest.raises(WorkerError) as error:
            query_workers([endpoint], timeout_s=5.0)
        thread.join(5)
    assert endpoint in error.value.message
    assert "not llama.cpp's rpc-server" in error.value.message


def test_plan_with_a_dead_worker_exits_7_naming_it(smollm2_gguf: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "homelab", "plan", str(smollm2_gguf), "--vram", "8GiB"]
        + ["--rpc", dead],
        capture_output=True,
        text=True,
        timeout=120,
        env=worker_env(),
    )
    assert done.returncode == ExitCode.WORKER, done.stdout + done.stderr
    assert f"RPC worker {dead} is not reachable" in done.stderr
    assert "Traceback" not in done.stderr


def test_plan_json_has_one_device_per_worker_with_its_endpoint_and_memory(
    two_workers, smollm2_gguf: Path
) -> None:
    import json

    a, b = two_workers
    done = subprocess.run(
        [sys.executable, "-m", "homelab", "plan", str(smollm2_gguf), "--json"]
        + ["--ctx", "512", "--parallel", "1", "--rpc", f"{a.endpoint},{b.endpoint}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=worker_env(),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    plan = json.loads(done.stdout)
    asked = {d.endpoint: d for d in query_workers([a.endpoint, b.endpoint])}
    devices = plan["devices"]
    assert [(d["llama_device"], d["endpoint"]) for d in devices] == [
        ("RPC0", a.endpoint),
        ("RPC1", b.endpoint),
    ]
    for entry in devices:
        worker = asked[entry["endpoint"]]
        assert entry["kind"] == "rpc" and entry["total"] == worker.total
        assert abs((entry["total"] - entry["other"]) - worker.free) < 1 << 30  # free RAM moves
        assert entry["blocks"] > 0
    argv = plan["argv"]
    assert argv[argv.index("--rpc") + 1] == f"{a.endpoint},{b.endpoint}"
