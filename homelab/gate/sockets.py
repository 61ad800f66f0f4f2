"""The gate's client connections bounded in time and number.

Why: 1,100 idle sockets (no key needed) on a gate with the common 1,024 open-file limit
starved every keyed client, and the accept loop logged "Too many open files" with a
traceback about a million times; a client sending its headers one byte a second was never
cut. So:

- **time**: aiohttp's ``keepalive_timeout`` (the runner's ``idle_timeout_s``) runs from the
  moment a connection opens, and from the end of each answer, until a whole request has
  arrived: an idle socket and a slow header sender are both closed when it passes
  (aiohttp ≥ 3.10 starts it at ``connection_made``);
- **number**: the soft open-file limit is raised to the hard one at start, and the gate
  holds at most :func:`connection_cap` client connections; one more is answered 503 and
  closed at once, so the process never runs out of descriptors for its engine and logs.
"""

from __future__ import annotations

import asyncio
import json
import resource
from typing import Any, cast

from aiohttp import web

from homelab.gate.http_errors import GateProtocol

RESERVED_FDS = 128
"""Descriptors kept for everything else: the engine's connections, logs, the listener."""
UNLIMITED_FDS = 65536
"""The soft limit asked for when the hard one is unlimited."""
_BODY = json.dumps(
    {
        "error": {
            "code": "too_many_connections",
            "message": "The gate holds as many connections as it may; retry shortly.",
            "type": "unavailable_error",
        }
    }
).encode()
OVER_CAP = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 2\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(_BODY)
) + _BODY


def raise_open_file_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard one (the process's own right); returns
    the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = UNLIMITED_FDS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # refused (a container's own cap): keep the soft one
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_cap(setting: int | None) -> int:
    """The most client connections held at once: ``setting``, never more than the
    open-file limit (raised first) less :data:`RESERVED_FDS`."""
    limit = raise_open_file_limit()
    room = UNLIMITED_FDS if limit == resource.RLIM_INFINITY else max(16, limit - RESERVED_FDS)
    return room if setting is None else min(setting, room)


class _Refuse(asyncio.Protocol):
    """A connection over the cap: answered 503 and closed, never read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(OVER_CAP)
        transport.close()


class _Capped:
    """The listener's protocol factory: aiohttp's server (its handler answering its errors
    in JSON: :class:`~homelab.gate.http_errors.GateProtocol`) while under the cap."""

    def __init__(self, server: web.Server, cap: int) -> None:
        self.server, self.cap = server, cap

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.server.connections) >= self.cap:
            return _Refuse()
        # aiohttp's handler with JSON error answers (what web.Server() makes, as its class)
        return GateProtocol(self.server, loop=self.server._loop, **self.server._kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.server, name)


class CappedRunner(web.AppRunner):
    """An :class:`aiohttp.web.AppRunner` whose sites hold at most ``max_connections``."""

    def __init__(self, app: web.Application, *, max_connections: int, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.max_connections = max_connections

    @property
    def server(self) -> web.Server | None:
        """What a site listens with (``TCPSite.start`` reads it): the capped factory."""
        base = super().server
        if base is None:
            return None
        return cast(web.Server, _Capped(base, self.max_connections))
