"""``homelab worker``'s domain: run llama.cpp's rpc-server under the engine supervisor.

An RPC worker lends this machine's memory and compute to a llama-server on another one
(``--rpc host:port``). It is supervised like the engine (:mod:`homelab.engine.supervision`):
its own process group, stopped with it (SIGTERM to the group, then SIGKILL), restarted
after a crash, with a session log. Ready = the port accepts and answers llama.cpp's RPC
handshake (:mod:`homelab.engine.llamacpp.rpc_protocol`); rpc-server prints nothing
reliable when it listens (its stdout is block-buffered into the log until a client comes).

rpc-server's options in the pinned llama.cpp (b11312, ``tools/rpc/rpc-server.cpp``):
``-H/--host`` (default 127.0.0.1), ``-p/--port`` (default 50052), ``-t/--threads``
(CPU device threads), ``-d/--device`` (comma-separated, default: every GPU, else the CPU),
``-c/--cache`` (keep received tensors in ``$LLAMA_CACHE/rpc``, so a model's weights cross
the network once rather than at every load). There is no memory limit: a worker offers
its device's whole free memory. And no authentication at all: anyone who reaches the port
can allocate memory and run graphs there, so a worker on a non-loopback address belongs
on a trusted network only (:data:`TRUST_WARNING`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from homelab.engine.llamacpp.rpc_protocol import RpcConnection, RpcProblem
from homelab.engine.supervision.failure import QUOTE_LINES, EngineFailure
from homelab.engine.supervision.readiness import EngineProfile, HealthAnswer
from homelab.engine.supervision.states import EngineSpec
from homelab.errors import UsageError

DEFAULT_PORT = 50052
"""rpc-server's own default port."""
PROGRAM = "rpc-server"
KIND = "llama.cpp-rpc"
PROBE_TIMEOUT_S = 2.0
IGNORING_SIGPIPE = ("/bin/sh", "-c", 'trap "" PIPE; exec "$0" "$@"')
"""How rpc-server is started: with SIGPIPE ignored (kept across ``exec``). Otherwise a client
that leaves before its reply (a timed-out query, a killed llama-server) kills the worker
with SIGPIPE when rpc-server writes the reply; ignored, the write fails and it serves on."""
START_TIMEOUT_S = 60.0
TRUST_WARNING = (
    "llama.cpp's RPC has no authentication and no encryption: anyone who can reach {where} "
    "can use this machine's memory and run code-like graphs on it. Keep it on a trusted "
    "network (a home LAN behind a firewall, a VPN), never on the internet."
)
_NOT_SERVING = (
    (
        "Failed to create server socket",
        "could not listen (the port is taken or the address is not this machine's)",
        "pick another port, or stop what holds it",
    ),
    (
        "error: unknown device",
        "was given a device it does not have",
        "fix the worker's device setting (the devices it has are listed above)",
    ),
    ("No devices found", "found no device to serve", "check the GPU driver, or serve the CPU"),
    (
        "Failed to find RPC backend",
        "was built without the RPC backend",
        "run `homelab engine build --force`",
    ),
)
"""(what rpc-server logs, what it could not do, the next step): each fails again the same way."""


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """One worker's settings; ``threads`` None: rpc-server's default (half the CPUs)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    threads: int | None = None
    devices: tuple[str, ...] = ()
    """rpc-server's ``--device`` list (e.g. ``CUDA0``); empty: its default."""
    cache: bool = False
    """Keep received weights on the worker's disk (rpc-server ``--cache``)."""

    def __post_init__(self) -> None:
        if not self.host or any(c.isspace() or c in ":/[]," for c in self.host):
            raise UsageError(
                f"The worker's host must be an IPv4 address or host name, not {self.host!r}.",
                hint="fix the worker host setting (llama.cpp's RPC takes no IPv6 literal)",
            )
        if not 1 <= self.port <= 65535:
            raise UsageError(f"The worker's port must be between 1 and 65535, not {self.port}.")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"The worker's threads must be 1 or more, not {self.threads}.")

    @property
    def endpoint(self) -> str:
        """``host:port`` as the main machine's RPC workers setting names it."""
        return f"{self.host}:{self.port}"

    def warning(self) -> str | None:
        """The plain warning a worker others can reach gets; None on loopback."""
        return None if is_loopback(self.host) else TRUST_WARNING.format(where=self.endpoint)


def is_loopback(host: str) -> bool:
    """``localhost`` or a 127.x address (``0.0.0.0`` is every address: not loopback)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def worker_argv(executable: str | Path, settings: WorkerSettings) -> list[str]:
    """rpc-server's command line (``--host``/``--port`` are set again by the supervisor)."""
    argv = [str(executable), "--host", settings.host, "--port", str(settings.port)]
    if settings.threads is not None:
        argv += ["--threads", str(settings.threads)]
    if settings.devices:
        argv += ["--device", ",".join(settings.devices)]
    if settings.cache:
        argv.append("--cache")
    return argv


def worker_spec(settings: WorkerSettings, executable: str | Path) -> EngineSpec:
    """What the supervisor runs: the pinned port (the main machine dials exactly it)."""
    return EngineSpec(
        argv=(*IGNORING_SIGPIPE, *worker_argv(executable, settings)),
        model=PROGRAM,
        host=settings.host,
        port=settings.port,
        port_pinned=True,
        start_timeout_s=START_TIMEOUT_S,
        stop_grace_s=5.0,
    )


def probe_worker(url: str) -> HealthAnswer:
    """Does the worker at ``url`` (``http://host:port``, the supervisor's form) answer the
    RPC handshake? (0.0.0.0 is probed on loopback.)"""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    host = "127.0.0.1" if host == "0.0.0.0" else host
    try:
        with RpcConnection(host, parts.port or DEFAULT_PORT, timeout_s=PROBE_TIMEOUT_S) as conn:
            hello = conn.open()
    except RpcProblem as problem:
        return HealthAnswer(False, None, str(problem))
    return HealthAnswer(hello.compatible, None, f"RPC protocol {hello.version}")


def diagnose_worker(lines: Sequence[str], returncode: int | None) -> EngineFailure:
    """Why rpc-server stopped (it exits 0 even when it could not listen)."""
    for needle, what, hint in _NOT_SERVING:
        hits = [i for i, line in enumerate(lines) if needle in line]
        if hits:
            first = hits[0]
            return EngineFailure(
                "RPC worker failed",
                f"rpc-server {what}",
                hint,
                quoted=tuple(lines[first : first + QUOTE_LINES]),
                returncode=returncode,
                permanent=True,
                port_conflict=needle.startswith("Failed to create server socket"),
            )
    how = "was killed" if returncode is not None and returncode < 0 else "stopped"
    code = f" (exit code {returncode})" if returncode is not None else ""
    return EngineFailure(
        "RPC worker stopped",
        f"rpc-server {how}{code}",
        "see the worker's log",
        quoted=tuple(line for line in lines[-QUOTE_LINES:] if line.strip()),
        returncode=returncode,
    )


def worker_profile() -> EngineProfile:
    """The supervisor's view of rpc-server."""
    return EngineProfile(
        name=PROGRAM,
        serving_line=re.compile(r"Starting RPC server"),
        diagnose=diagnose_worker,
        health_path="",
        kind=KIND,
        probe=probe_worker,
    )
