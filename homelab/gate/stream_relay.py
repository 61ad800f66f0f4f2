"""An engine's answer stream relayed to the client chunk by chunk, as it arrives (no
buffering), with a copy read for its accounting and for its end.

Its last event (:class:`~homelab.gate.sse.StreamTally` knows it) marks the answer whole: a
client that closes after it (Codex does, at once) was answered. An engine that breaks off
before it (killed, crashed) gets the client's stream ended with an error event in the
route's shape, never a bare truncated body.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

from homelab.gate.access_log import CHARGE_KEY
from homelab.gate.core import Gate
from homelab.gate.replies import sse_engine_gone
from homelab.gate.requests import Asked
from homelab.gate.sse import Outcome, StreamTally


async def relay_stream(
    gate: Gate,
    request: web.Request,
    asked: Asked,
    upstream: aiohttp.ClientResponse,
    response: web.StreamResponse,
    outcome: Outcome,
) -> web.StreamResponse:
    """Relay ``upstream``'s stream into ``response`` (prepared); ``outcome`` takes the
    engine's counts even when the client left mid-stream."""
    tally = StreamTally()
    charge = request.get(CHARGE_KEY)
    chunks = upstream.content.iter_any()
    try:
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except aiohttp.ClientError as error:  # the engine's side: it died mid-answer
                await _engine_gone(gate, response, asked, tally, error)
                break
            tally.feed(chunk)
            await response.write(chunk)
            if tally.ended and charge is not None:
                charge.delivered = True  # a client may close now: it has the answer
        tally.feed(b"\n")
    finally:  # the engine's count, even when the client left mid-stream
        outcome.update(tally.outcome)
    if tally.errors:
        gate.metrics.upstream_errors.labels(kind="stream").inc(tally.errors)
    await response.write_eof()
    return response


async def _engine_gone(
    gate: Gate,
    response: web.StreamResponse,
    asked: Asked,
    tally: StreamTally,
    error: aiohttp.ClientError,
) -> None:
    """The engine's stream broke off before its last event: end the client's stream with
    an error event in the route's shape (a cut answer is said, never a bare truncated
    body). After the last event a broken connection is nothing: the answer was whole."""
    if tally.ended:
        return
    gate.metrics.upstream_errors.labels(kind="cut").inc()
    message = (
        f"The engine stopped in the middle of this answer ({type(error).__name__}); "
        "what came before is all there is. Retry: a restarted engine answers again."
    )
    await response.write(
        sse_engine_gone(message, path=asked.route.path, anthropic=asked.route.anthropic)
    )
