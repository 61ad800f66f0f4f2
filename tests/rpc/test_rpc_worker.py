"""``homelab worker``: the real rpc-server, supervised; Ctrl-C stops it with nothing left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from homelab.engine.llamacpp.rpc_query import ask_worker
from homelab.engine.llamacpp.rpc_worker import (
    WorkerSettings,
    diagnose_worker,
    probe_worker,
    worker_argv,
)
from homelab.errors import ExitCode, UsageError
from tests.factory.server_log import free_port
from tests.rpc.conftest import pid_alive, worker_env


def test_a_worker_answers_says_what_it_offers_and_ctrl_c_stops_it(start_worker) -> None:
    worker = start_worker()
    offers = worker.wait_for(r"^offers device 0: ")
    assert "free of" in offers
    (free, total), *more = ask_worker(worker.endpoint)
    assert not more and 0 < free <= total  # the CPU device: this machine's RAM
    assert f"--rpc {worker.endpoint}" in worker.wait_for(r"^ready: ")
    assert probe_worker(f"http://{worker.endpoint}").ok
    [server] = worker.server_pids
    assert pid_alive(server)
    assert worker.interrupt(signal.SIGINT) == 0
    assert "stopped" in worker.lines[-1]
    assert not pid_alive(server)


def test_sigterm_stops_it_too(start_worker) -> None:
    worker = start_worker()
    [server] = worker.server_pids
    assert worker.interrupt(signal.SIGTERM) == 0
    assert not pid_alive(server)


def test_a_killed_rpc_server_is_restarted(start_worker) -> None:
    worker = start_worker()
    [first] = worker.server_pids
    os.kill(first, signal.SIGKILL)
    again = worker.wait_for(r"^ready again: ")
    second = worker.server_pids[-1]
    assert second != first and f"pid {second}" in again
    assert ask_worker(worker.endpoint)[0][1] > 0


def test_a_taken_port_is_a_clear_error_not_a_move() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "homelab", "worker", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env=worker_env(),
        )
    assert done.returncode == ExitCode.ENGINE, done.stderr
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr


def test_a_non_loopback_address_is_warned_about_plainly() -> None:
    """192.0.2.1 (TEST-NET) is no address of this machine: the worker warns, then cannot bind."""
    done = subprocess.run(
        [sys.executable, "-m", "homelab", "worker", "--host", "192.0.2.1", "--port", "50052"],
        capture_output=True,
        text=True,
        timeout=60,
        env=worker_env(),
    )
    assert "no authentication" in done.stderr and "trusted network" in done.stderr
    assert "192.0.2.1:50052" in done.stderr
    assert done.returncode == ExitCode.ENGINE
    assert "not an address of this machine" in done.stderr


def test_settings_argv_and_the_warning() -> None:
    settings = WorkerSettings(port=50060, threads=3, devices=("CUDA0", "CUDA1"), cache=True)
    assert worker_argv("/x/rpc-server", settings) == [
        "/x/rpc-server",
        "--host",
        "127.0.0.1",
        "--port",
        "50060",
        "--threads",
        "3",
        "--device",
        "CUDA0,CUDA1",
        "--cache",
    ]
    assert settings.warning() is None and WorkerSettings(host="localhost").warning() is None
    warning = WorkerSettings(host="0.0.0.0").warning()
    assert warning is not None and "0.0.0.0:50052" in warning
    for bad in ({"host": "::1"}, {"host": ""}, {"port": 0}, {"threads": 0}):
        with pytest.raises(UsageError):
            WorkerSettings(**bad)  # type: ignore[arg-type]


def test_a_worker_that_cannot_listen_is_explained() -> None:
    """The real rpc-server on a port already held: it says so on its output and exits 0."""
    from homelab.engine.llamacpp.locate import locate_rpc_server

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [str(locate_rpc_server().path), "--host", "127.0.0.1", "--port", str(port), "-t", "1"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    lines = (done.stdout + done.stderr).splitlines()
    failure = diagnose_worker(lines, done.returncode)
    assert failure.port_conflict and failure.permanent, lines
    assert "could not listen" in failure.message
    assert any("Failed to create server socket" in line for line in failure.quoted)


def test_the_probe_says_when_nothing_listens() -> None:
    answer = probe_worker(f"http://127.0.0.1:{free_port()}")
    assert not answer.ok and "connection failed" in answer.detail
