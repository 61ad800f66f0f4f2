"""Which loopback port the engine listens on.

The wanted port (8080 by default) is used when nothing holds it. When another
program holds it, homelab moves to the next free port and says so plainly
(which program, when the system tells us), unless the user pinned the port
with ``--port``: then it is an error, because a port a person typed is one
their clients are configured for.

"Holds" is tested the way the engine will bind: a socket with SO_REUSEADDR, so a
port lingering in TIME_WAIT after the previous engine counts as free (it is).
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

import psutil

from homelab.errors import EngineError

LOOPBACK = "127.0.0.1"
SEARCH_SPAN = 100
"""How many ports above the wanted one are tried before giving up."""


@dataclass(frozen=True, slots=True)
class PortChoice:
    """The port to use and, when it moved, why."""

    host: str
    port: int
    wanted: int
    holder: str | None = None
    """Who holds the wanted port ("python3, pid 4242"), when it moved and the system says."""

    @property
    def moved(self) -> bool:
        """True when the wanted port was taken and another one is used."""
        return self.port != self.wanted

    def note(self) -> str | None:
        """The plain sentence to show when the port moved; None when it did not."""
        if not self.moved:
            return None
        who = f" by {self.holder}" if self.holder else ""
        return f"port {self.wanted} is in use{who}; using port {self.port} instead"


def port_is_free(host: str, port: int) -> bool:
    """True when a listener could bind ``host:port`` right now.

    Raises:
        EngineError: the address is not one of this machine's (``EADDRNOTAVAIL``).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRNOTAVAIL:
                raise EngineError(f"{host} is not an address of this machine") from None
            return False
    return True


def port_holder(port: int) -> str | None:
    """ "name, pid N" of the process listening on ``port``, or None when unknown.

    Best effort: the system may not tell which process owns a socket of another user.
    """
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                return None
            try:
                return f"{psutil.Process(conn.pid).name()}, pid {conn.pid}"
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                return f"pid {conn.pid}"
    return None


def choose_port(host: str, wanted: int, *, pinned: bool, span: int = SEARCH_SPAN) -> PortChoice:
    """The port the engine should listen on.

    Args:
        host: the address to listen on (loopback by default).
        wanted: the port asked for.
        pinned: True when the user typed ``--port``: a taken port is an error, not a move.
        span: how many ports above ``wanted`` to try.

    Raises:
        EngineError: the port is pinned and taken, it is out of range, or no port in
            ``wanted .. wanted + span`` is free.
    """
    if not 1 <= wanted <= 65535:
        raise EngineError(f"port {wanted} is out of range (1-65535)", title="Bad port")
    if port_is_free(host, wanted):
        return PortChoice(host, wanted, wanted)
    holder = port_holder(wanted)
    who = f" by {holder}" if holder else " by another program"
    if pinned:
        raise EngineError(
            f"port {wanted} on {host} is in use{who}",
            hint="pick another `port`, or leave `port` unset: homelab takes the next free one",
            title="Port in use",
        )
    for port in range(wanted + 1, min(wanted + span, 65535) + 1):
        if port_is_free(host, port):
            return PortChoice(host, port, wanted, holder)
    raise EngineError(
        f"ports {wanted}-{min(wanted + span, 65535)} on {host} are all in use",
        hint="free one, or pick a `port` elsewhere",
        title="Port in use",
    )


def with_port(argv: list[str], host: str, port: int) -> list[str]:
    """``argv`` with its ``--host``/``--port`` values set (appended when absent).

    Both llama-server and ``vllm serve`` spell them ``--host H --port P``.
    """
    out = list(argv)
    for flag, value in (("--host", host), ("--port", str(port))):
        if flag in out:
            index = out.index(flag)
            if index + 1 < len(out):
                out[index + 1] = value
            else:
                out.append(value)
        else:
            out += [flag, value]
    return out
