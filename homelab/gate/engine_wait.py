"""An admitted request whose engine is down for a moment waits for it, bounded, then is sent.

The engine behind the gate restarts under the same gate — into a new plan (the TUI's
re-plan, :mod:`homelab.serve.replan`), a smaller one after an
out-of-memory (the heal), or after a crash the supervisor restarts — and for those seconds
its port refuses connections, or answers 503 while the model loads. A request the gate
admitted then (or one the engine was answering, not streaming yet, when it was ended) is
not failed: the gate looks at the engine's ``/health`` until it is ready again, for at most
``GateSettings.engine_wait_s``, and sends the request again — without a pinned slot, as
the new engine's slots may be fewer and its prompt cache is empty. A streaming request the
gate already answered 200 (it queued) keeps getting ``: queued`` comments meanwhile.

Only a stream that had started coming back is lost (its bytes reached the client); the
engine's own answer is passed on when the wait ends with it still loading, and the last
connection error when it never came back (the caller answers 502).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from homelab.gate.upstream import Upstream

log = logging.getLogger(__name__)

HEALTH_EVERY_S = 0.25
"""Time between looks at a restarting engine's ``/health``."""
LOADING = 503
"""llama-server's answer while it loads the model."""


async def post_when_up(
    upstream: Upstream,
    path: str,
    body: bytes,
    *,
    again: Callable[[], bytes],
    wait_s: float,
    keepalive: Callable[[], Awaitable[None]] | None = None,
    keepalive_s: float = 5.0,
) -> aiohttp.ClientResponse:
    """Send ``body``; while the engine refuses it (down, or loading), wait for its
    ``/health`` and send ``again()`` (at most ``wait_s`` in all). ``keepalive`` is awaited
    every ``keepalive_s`` while waiting.

    Raises:
        aiohttp.ClientConnectionError: the engine did not come back within ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    first = True
    while True:
        try:
            response = await upstream.post(path, body if first else again())
        except aiohttp.ClientConnectionError as error:
            if time.monotonic() >= deadline:
                raise
            log.info("engine unreachable (%s): waiting for it", error)
        else:
            if response.status != LOADING or time.monotonic() >= deadline:
                return response
            response.release()
            log.info("engine loading: waiting for it")
        first = False
        await wait_healthy(upstream, deadline, keepalive, keepalive_s)


async def wait_healthy(
    upstream: Upstream,
    deadline: float,
    keepalive: Callable[[], Awaitable[None]] | None = None,
    keepalive_s: float = 5.0,
) -> bool:
    """Until the engine's ``/health`` answers 200 or ``deadline`` (monotonic) passed; True
    when it answered."""
    next_tick = time.monotonic() + keepalive_s
    while True:
        if await upstream.get_json("/health") is not None:
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if keepalive is not None and now >= next_tick:
            await keepalive()
            next_tick = now + keepalive_s
        await asyncio.sleep(min(HEALTH_EVERY_S, max(0.0, deadline - now)))
