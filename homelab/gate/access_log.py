"""The gate's log of its requests: one JSON line per request it answered.

Why: what a client really sends (its route, the completion bound it asks, the headers it
names) and what the gate did with it (the status, the tokens it charged against the
per-request ceiling, the engine's own prompt count) are what a person debugging an agent
needs, and what the real-agent tests check (tests/agents_real). The middleware logs to the
``homelab.gate.access`` logger (the detached gate process writes it to its log,
``state_dir()/logs/gate-….log``) as ``request {json}``; header values are never logged but
for ``User-Agent`` and Anthropic's version and beta headers (no key, no token).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from aiohttp import web

log = logging.getLogger("homelab.gate.access")
PREFIX = "request "
"""Each log line: this, then the entry as JSON (:func:`entry_of_line` reads it back)."""
SHOWN_HEADERS = ("user-agent", "anthropic-version", "anthropic-beta")
"""Headers whose values are logged; of the others only the names."""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class Charge:
    """What the gate made of one completion request (filled in as it goes)."""

    asked_max_tokens: int | None
    """The smallest completion bound the client sent; None: none."""
    stream: bool
    prompt_tokens: int | None = None
    """The prompt as charged: the engine's count, or the gate's conservative estimate."""
    prompt_exact: bool = False
    completion_cap: int | None = None
    """The completion bound the gate wrote into the forwarded request."""
    ceiling_tokens: int | None = None
    """The most one request may be charged (the gate's per-request ceiling)."""
    engine_prompt_tokens: int | None = None
    """The prompt tokens the engine reported (processed and cached) once it answered."""
    engine_completion_tokens: int | None = None
    """The tokens the engine generated, as it reported them."""
    engine_error: str | None = None
    """An error the engine reported (in its answer or inside a stream)."""
    model: str | None = None
    """The ``model`` the client named."""
    delivered: bool = False
    """The stream's last event (``[DONE]``, ``response.completed``, ``message_stop``) was
    written to the client: a client that closes after it (Codex does, at once) was answered."""

    @property
    def charged_tokens(self) -> int | None:
        if self.prompt_tokens is None or self.completion_cap is None:
            return None
        return self.prompt_tokens + self.completion_cap


CHARGE_KEY: web.RequestKey[Charge] = web.RequestKey("homelab_gate_charge", Charge)
"""Where the completion routes put the request's :class:`Charge` (``request[CHARGE_KEY]``)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One request as the gate answered it."""

    method: str
    path: str
    status: int
    seconds: float
    headers: dict[str, str]
    """Values of :data:`SHOWN_HEADERS`; every other header sent, by name, as ``""``."""
    charge: dict[str, object] | None = None
    """The completion routes' :class:`Charge` with ``charged_tokens``; None for others."""

    def line(self) -> str:
        return PREFIX + json.dumps(asdict(self), sort_keys=True)


def entry_of_line(line: str) -> Entry | None:
    """The entry a log line holds; None for any other line."""
    _, found, text = line.partition(PREFIX)
    if not found:
        return None
    try:
        data = json.loads(text)
        return Entry(**data)
    except (ValueError, TypeError):
        return None


def _headers(request: web.Request) -> dict[str, str]:
    shown = {}
    for name, value in request.headers.items():
        lower = name.lower()
        shown[lower] = value[:200] if lower in SHOWN_HEADERS else ""
    return shown


def _charge(request: web.Request) -> dict[str, object] | None:
    charge = request.get(CHARGE_KEY)
    if charge is None:
        return None
    return {**asdict(charge), "charged_tokens": charge.charged_tokens}


@web.middleware
async def access_log(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Log the request once it is answered (a stream: once it ended)."""
    start = time.monotonic()
    status = 499  # the client left before the whole answer (nginx's word for it)
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as error:
        status = error.status
        raise
    except asyncio.CancelledError:
        charge = request.get(CHARGE_KEY)
        if charge is not None and charge.delivered:
            status = 200  # the whole answer went out; the client closed after its last event
        raise
    except Exception:
        status = 500
        raise
    finally:
        if log.isEnabledFor(logging.INFO):
            entry = Entry(
                request.method,
                request.path,
                status,
                round(time.monotonic() - start, 3),
                _headers(request),
                _charge(request),
            )
            log.info("%s", entry.line())
