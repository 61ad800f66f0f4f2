"""Ask each RPC worker what memory it offers, before the plan: the remote devices to budget.

Each ``host:port`` (an ``rpc-server``, e.g. ``homelab worker`` on another machine) is asked
in llama.cpp's own RPC protocol (:mod:`homelab.engine.llamacpp.rpc_protocol`): the
handshake, its device count, each device's free and total memory, to the byte. The devices
are named as the pinned llama-server names them (``ggml_backend_rpc_add_server``): ``RPC0``,
``RPC1``, ... counted across the workers in the order given to ``--rpc``, each worker's
devices in its own order; that is the name ``--device`` takes and ``--list-devices`` prints.
(The load log names a worker's *buffers* differently, ``RPC<index on that worker>[host:port]``;
see :func:`homelab.engine.llamacpp.log.rpc_buffer_endpoint`.)

A worker that refuses, times out, speaks another protocol version or offers no device is a
:class:`~homelab.errors.WorkerError` naming it (exit code 7).
"""

from __future__ import annotations

from collections.abc import Iterable

from homelab.engine.llamacpp.rpc_protocol import (
    PROTO_MAJOR,
    PROTO_MINOR,
    RpcConnection,
    RpcProblem,
    RpcRefused,
    RpcTimeout,
)
from homelab.errors import WorkerError
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.rpc_endpoints import parse_endpoints, split_endpoint

QUERY_TIMEOUT_S = 5.0
"""How long one worker may take to connect and to answer each question."""
START_HINT = (
    "start it there with `homelab worker --host ADDRESS --port PORT` (the same homelab and "
    "llama.cpp build), or drop it from the RPC workers setting"
)


def query_workers(
    endpoints: Iterable[str], *, timeout_s: float = QUERY_TIMEOUT_S
) -> tuple[RemoteDevice, ...]:
    """Every device of every worker, in llama-server's order, with its free and total bytes.

    Raises:
        UsageError: an endpoint is malformed or listed twice.
        WorkerError: a worker did not answer as a compatible rpc-server (which one, and how).
    """
    devices: list[RemoteDevice] = []
    for endpoint in parse_endpoints(tuple(endpoints)):
        for free, total in ask_worker(endpoint, timeout_s=timeout_s):
            devices.append(RemoteDevice(endpoint, f"RPC{len(devices)}", total, free))
    return tuple(devices)


def ask_worker(endpoint: str, *, timeout_s: float = QUERY_TIMEOUT_S) -> list[tuple[int, int]]:
    """``(free, total)`` bytes of each device of the worker at ``endpoint``.

    Raises:
        WorkerError: it did not answer as a compatible rpc-server.
    """
    host, port = split_endpoint(endpoint)
    try:
        with RpcConnection(host, port, timeout_s=timeout_s) as conn:
            hello = conn.open()
            if not hello.compatible:
                raise WorkerError(
                    f"RPC worker {endpoint} speaks RPC protocol {hello.version}; this homelab's "
                    f"llama.cpp speaks {PROTO_MAJOR}.{PROTO_MINOR}.x",
                    hint="run the same homelab version (and `homelab engine build`) on the worker",
                    title="RPC worker of another version",
                )
            count = conn.device_count()
            if count == 0:
                raise WorkerError(
                    f"RPC worker {endpoint} answers but offers no device",
                    hint="check the worker's device setting (rpc-server -d)",
                )
            memory = [conn.device_memory(i) for i in range(count)]
    except RpcRefused as problem:
        raise WorkerError(
            f"RPC worker {endpoint} is not reachable: {problem}", hint=START_HINT
        ) from None
    except RpcTimeout as problem:
        raise WorkerError(
            f"RPC worker {endpoint} did not answer: {problem}. llama.cpp's rpc-server serves one "
            "client at a time, so a worker another llama-server is using answers nobody else",
            hint="stop the engine that uses it (`homelab stop` on its main machine), check the "
            "host and its firewall, or drop it from the RPC workers setting",
        ) from None
    except RpcProblem as problem:
        raise WorkerError(
            f"RPC worker {endpoint} did not answer as llama.cpp's rpc-server: {problem}",
            hint=START_HINT,
        ) from None
    return [(m.free, m.total) for m in memory]
