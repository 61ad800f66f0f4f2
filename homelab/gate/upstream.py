"""The gate's client of its engine (aiohttp, loopback only, no proxies from the
environment): token counts, ``/props``, ``/slots``, and waiting for a slot to go idle.

Both send the engine's own key (:mod:`homelab.engine.engine_key`) on every request, as
session headers: an engine started behind the gate answers nothing else (401), so every
path through here (forwards, counts, ``/props``, ``/slots``, ``/metrics``, ``/health``,
passthrough) is covered at once; a client's own ``Authorization`` is never passed on.

Two sessions: ``forward`` carries the admitted requests (their number is bounded by
admission), ``aux`` carries counts and status calls over at most :data:`AUX_CONNECTIONS`
connections — llama-server serves HTTP with ``max(n_parallel + 2, cores − 1)`` threads,
and a connection it holds open is a thread the admitted requests cannot use.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from homelab.engine.engine_key import key_headers
from homelab.engine.llamacpp.answers import ServerProps, SlotStatus, parse_props, parse_slot
from homelab.engine.loopback import require_loopback

AUX_CONNECTIONS = 2
KEEPALIVE_S = 2.0
"""Idle connections to the engine are dropped after this; llama-server closes its side
after 5 s idle, and a request sent on a connection it is closing fails."""
COUNT_TIMEOUT_S = 10.0
STATUS_TIMEOUT_S = 10.0
SLOT_POLL_S = 1.25
"""Time between looks at ``/slots`` after a client left (see :meth:`Upstream.wait_idle`)."""


class Upstream:
    """One engine, as the gate's event loop talks to it. Create and close on that loop."""

    def __init__(self, engine_url: str, engine_key: str | None = None) -> None:
        self.url = require_loopback(engine_url).rstrip("/")
        headers = key_headers(engine_key)
        self.forward = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5.0),
            auto_decompress=False,
            trust_env=False,
        )
        self.key_refused = False
        """The engine's last status or count answer was 401: it refused the key this gate
        holds (said to clients as that, not as an engine still loading)."""
        self.aux = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=AUX_CONNECTIONS, keepalive_timeout=KEEPALIVE_S),
            timeout=aiohttp.ClientTimeout(total=STATUS_TIMEOUT_S, sock_connect=5.0),
            trust_env=False,
        )

    async def close(self) -> None:
        await self.forward.close()
        await self.aux.close()

    async def post(self, path: str, body: bytes) -> aiohttp.ClientResponse:
        """Send an admitted request. A kept-alive connection the engine closed before
        answering (``ServerDisconnectedError``) is retried once on a new connection."""
        url, headers = self.url + path, {"Content-Type": "application/json"}
        try:
            return await self.forward.post(url, data=body, headers=headers)
        except aiohttp.ServerDisconnectedError:
            return await self.forward.post(url, data=body, headers=headers)

    async def count_tokens(self, path: str, body: dict[str, Any]) -> int | None:
        """Prompt tokens as the engine counts them; None when it could not say in time."""
        data = await self._count(path, body)
        if not isinstance(data, dict):
            return None
        if isinstance(data.get("tokens"), list):
            return len(data["tokens"])
        value = data.get("input_tokens")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    async def tokenize(self, body: dict[str, Any]) -> list[Any] | None:
        """``/tokenize``'s token ids for ``body``; None when it could not say in time."""
        data = await self._count("/tokenize", body)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        return tokens if isinstance(tokens, list) else None

    async def _count(self, path: str, body: dict[str, Any]) -> Any | None:
        """A count endpoint's JSON answer; None when it did not answer 200 in time."""
        for attempt in range(2):  # once more when a kept-alive connection was closed
            try:
                async with self.aux.post(
                    self.url + path,
                    data=json.dumps(body),
                    headers={"Content-Type": "application/json"},
                    timeout=aiohttp.ClientTimeout(total=COUNT_TIMEOUT_S),
                ) as resp:
                    self.key_refused = resp.status == 401
                    if resp.status != 200:
                        return None
                    data = await resp.json(content_type=None)
                    break
            except aiohttp.ServerDisconnectedError:
                if attempt:
                    return None
            except (aiohttp.ClientError, TimeoutError, ValueError):
                return None
        return data

    async def get_json(self, path: str) -> Any | None:
        """A status endpoint's JSON; None when the engine did not answer 200."""
        try:
            async with self.aux.get(self.url + path) as resp:
                self.key_refused = resp.status == 401
                if resp.status != 200:
                    return None
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def props(self) -> ServerProps | None:
        data = await self.get_json("/props")
        try:
            return None if data is None else parse_props(data)
        except TypeError:
            return None

    async def slots(self) -> list[SlotStatus] | None:
        data = await self.get_json("/slots")
        if not isinstance(data, list):
            return None
        try:
            return [parse_slot(item) for item in data]
        except ValueError:
            return None

    async def wait_idle(
        self, slot: int | None, others_busy: Callable[[], int], timeout_s: float
    ) -> bool:
        """Wait until the engine shows ``slot`` idle (or, without a slot, no more busy slots
        than ``others_busy()``, the gate's other running requests) on two looks in a row,
        :data:`SLOT_POLL_S` apart. False on timeout.

        Two looks: a request whose connection closed before the engine started it may
        still be started, then cancelled. Slow looks: llama-server (b11312) notices a closed
        non-streaming client only when its wait for results times out, and every result it
        hands out — a ``/slots`` answer included — restarts that wait, so polling fast would
        keep the cancelled task running.
        """
        deadline = time.monotonic() + timeout_s
        idle_looks = 0
        while True:
            await asyncio.sleep(min(SLOT_POLL_S, max(0.0, deadline - time.monotonic())))
            slots = await self.slots()
            if slots is not None:
                if slot is not None:
                    mine = [s for s in slots if s.id == slot]
                    idle = not mine or not mine[0].is_processing
                else:
                    idle = sum(1 for s in slots if s.is_processing) <= others_busy()
                idle_looks = idle_looks + 1 if idle else 0
                if idle_looks >= 2:
                    return True
            if time.monotonic() >= deadline:
                return False
