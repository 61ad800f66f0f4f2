"""The completion routes: parse, count, admit (or queue, or refuse), forward, release.

A request is charged ``prompt + completion cap`` (see :mod:`homelab.gate.requests`) and
waits in the admission queue; a streaming request that waits longer than the keep-alive
interval is answered 200 with SSE comments (``: queued``) until it is admitted. Once
admitted it is pinned to a slot (affinity) and forwarded; the answer goes back chunk by
chunk as it arrives (no buffering, no compression).

A client that leaves while queued frees its place at once. A client that leaves while
its request runs makes the gate close the upstream connection (llama-server then cancels
the task); its charge is freed when ``/slots`` shows the slot idle (bounded wait), not when
the socket closed — the engine may still be working on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
from aiohttp import web

from homelab.gate.access_log import CHARGE_KEY, Charge
from homelab.gate.admission import Refusal
from homelab.gate.core import Gate
from homelab.gate.engine_wait import post_when_up
from homelab.gate.errors import BadRequest
from homelab.gate.replies import (
    ENGINE_KEY_REFUSED,
    anthropic_engine_error,
    engine_client_error,
    engine_key_refused,
    error_reply,
    refusal_reply,
    sse_error,
)
from homelab.gate.requests import Asked, Route, completion_cap, forwarded_body, parse
from homelab.gate.sse import Outcome, outcome_of
from homelab.gate.stream_relay import relay_stream
from homelab.gate.waiting import AdmissionQueue, Refused, Ticket

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
KEEPALIVE = b": queued\n\n"
GONE = (asyncio.CancelledError, ConnectionError, aiohttp.ClientConnectionResetError)


async def complete(gate: Gate, request: web.Request, route: Route) -> web.StreamResponse:
    anthropic = route.anthropic
    try:
        asked = parse(route, await request.read())
    except BadRequest as error:
        gate.metrics.bad_requests.inc()
        return error_reply(error.status, error.message, kind=error.kind, anthropic=anthropic)
    model = asked.body.get("model")
    charge = Charge(asked.max_tokens, asked.stream, model=model if isinstance(model, str) else None)
    request[CHARGE_KEY] = charge
    queue = await gate.ready_queue()
    if queue is None and gate.upstream.key_refused:  # not loading: it refuses the gate's key
        return engine_key_refused(anthropic=anthropic)
    if queue is None:
        return error_reply(
            503,
            "The engine is not ready yet.",
            kind="unavailable_error",
            code="engine_loading",
            retry_after_s=2,
            anthropic=anthropic,
        )
    most = gate.settings.max_prompts or queue.limits.max_concurrent
    if asked.tasks > most:  # refused before the engine is asked to count any of them
        queue.refuse(Refusal.TOO_LARGE)
        return _too_many_tasks(asked, most, gate.settings.max_prompts is None)
    if queue.state.queued >= queue.state.max_queue and not _may_start(queue):
        queue.refuse(Refusal.QUEUE_FULL)  # refused before the engine is asked to count
        return _queue_full(queue, queue.retry_after_s(), anthropic)
    estimated = estimate_if_it_runs_now(queue, asked, gate.settings.max_tokens_cap)
    prompts, exact = estimated if estimated is not None else await gate.prompt_tokens(asked)
    ceiling = queue.limits.ceiling_tokens
    largest = max(prompts)
    completion = completion_cap(asked, largest, cap=gate.settings.max_tokens_cap, ceiling=ceiling)
    charge.prompt_tokens, charge.prompt_exact = sum(prompts), exact
    charge.completion_cap, charge.ceiling_tokens = completion, ceiling
    if completion < 1:
        queue.refuse(Refusal.TOO_LARGE)
        return _too_large(largest, exact, ceiling, asked)
    prompt = sum(prompts)
    try:
        ticket = queue.enter(prompt + asked.tasks * completion, asked.tasks)
    except Refused as refused:  # the queue filled while the prompt was counted
        if refused.reason is Refusal.TOO_LARGE:  # several prompts: more than the budget
            return _too_large(prompt, exact, queue.limits.budget_tokens, asked, every=True)
        return _queue_full(queue, refused.retry_after_s, anthropic)
    response: web.StreamResponse | None = None
    try:
        response = await _wait(gate, queue, ticket, request, asked)
    except GONE:
        queue.leave(ticket, Refusal.CLIENT_GONE)
        raise
    if not ticket.admitted:
        if ticket.refused is not None and response is None:  # new limits it never fits
            return _too_large(largest, exact, queue.limits.ceiling_tokens, asked)
        return response if response is not None else _timeout_reply(gate, queue, anthropic)
    return await _run(gate, queue, ticket, request, asked, completion, prompt, response)


def _too_large(
    prompt: int, exact: bool, fits: int, asked: Asked, *, every: bool = False
) -> web.Response:
    size = f"{prompt} tokens" if exact else f"about {prompt} tokens (estimated)"
    what = "prompts are" if every else "prompt is"
    per = "at once (all its prompts with their completions)" if every else "per request"
    return refusal_reply(
        Refusal.TOO_LARGE,
        f"This request's {what} {size}; the gate admits at most {fits} tokens {per} "
        f"(prompt and completion together), so it could never run. "
        f"Send at most {fits - 1} prompt tokens.",
        None,
        anthropic=asked.route.anthropic,
    )


def _too_many_tasks(asked: Asked, most: int, from_engine: bool) -> web.Response:
    prompts = max(1, len(asked.prompts))
    parts = f"{prompts} prompt{'s' if prompts > 1 else ''}"
    if asked.n > 1:
        parts += f" × n={asked.n}"
    why = "the engine's slots, max_concurrent" if from_engine else "the gate's max_prompts"
    return refusal_reply(
        Refusal.TOO_LARGE,
        f"This request asks for {parts} = {asked.tasks} engine tasks; the gate runs at most "
        f"{most} per request ({why}). Send fewer prompts, or a smaller 'n'.",
        None,
        anthropic=asked.route.anthropic,
    )


async def _wait(
    gate: Gate, queue: AdmissionQueue, ticket: Ticket, request: web.Request, asked: Asked
) -> web.StreamResponse | None:
    """Wait for admission. Returns the stream already answered 200 (keep-alives sent), or
    None; on a timeout the ticket has left the queue (and a started stream got its error)."""
    deadline = ticket.arrived + gate.settings.queue_timeout_s
    keepalive = gate.settings.keepalive_s
    response: web.StreamResponse | None = None
    next_tick = time.monotonic() + keepalive
    while True:
        now = time.monotonic()
        until = deadline if not asked.stream else min(deadline, next_tick)
        if await queue.wait(ticket, until - now):
            if ticket.refused is not None and response is not None:
                message = "The engine restarted with limits this request can never fit."
                await _end_stream(
                    response, asked, message, "invalid_request_error", ticket.refused.value
                )
            return response
        now = time.monotonic()
        if now >= deadline:
            queue.leave(ticket, Refusal.TIMEOUT)
            if response is not None:
                await _end_stream(
                    response, asked, _timeout_message(gate), "unavailable_error", "timeout"
                )
            return response
        if response is None:
            response = web.StreamResponse(status=200, headers=SSE_HEADERS)
            await response.prepare(request)
        await response.write(KEEPALIVE)
        next_tick = now + keepalive


async def _end_stream(
    response: web.StreamResponse, asked: Asked, message: str, kind: str, code: str
) -> web.StreamResponse:
    """End a stream already answered 200 with an error event."""
    await response.write(sse_error(message, kind, code, anthropic=asked.route.anthropic))
    await response.write_eof()
    return response


def estimate_if_it_runs_now(
    queue: AdmissionQueue, asked: Asked, cap: int
) -> tuple[list[int], bool] | None:
    """(the conservative estimate, False) when, charged by it, the request runs at once
    with its completion bound untouched: then asking the engine to count the prompt (a
    round trip, most of the gate's added latency, bench/bench_gate_latency.py) changes
    nothing but the charge, which the engine's ``usage`` corrects afterwards. None: count."""
    if asked.tasks > 1 or not _may_start(queue):  # several prompts: no usage corrects it
        return None
    estimate = asked.estimate_tokens()[0]
    wanted = cap if asked.max_tokens is None else min(asked.max_tokens, cap)
    state = queue.state
    room = min(queue.limits.ceiling_tokens, state.budget - state.charged)
    return ([estimate], False) if estimate + wanted <= room else None


def _may_start(queue: AdmissionQueue) -> bool:
    """Whether a request could start now (nothing waits and a place is free)."""
    state = queue.state
    return state.queued == 0 and state.running < state.max_concurrent


def _queue_full(queue: AdmissionQueue, retry_after_s: int, anthropic: bool) -> web.Response:
    return refusal_reply(
        Refusal.QUEUE_FULL,
        f"The gate's queue is full ({queue.state.max_queue} requests waiting); retry later.",
        retry_after_s,
        anthropic=anthropic,
    )


def _timeout_message(gate: Gate) -> str:
    return (
        f"The request waited {gate.settings.queue_timeout_s:g} s for admission and the "
        "engine was still busy; retry later."
    )


def _timeout_reply(gate: Gate, queue: AdmissionQueue, anthropic: bool) -> web.Response:
    return refusal_reply(
        Refusal.TIMEOUT, _timeout_message(gate), queue.retry_after_s(), anthropic=anthropic
    )


async def _run(
    gate: Gate,
    queue: AdmissionQueue,
    ticket: Ticket,
    request: web.Request,
    asked: Asked,
    completion: int,
    prompt: int,
    started: web.StreamResponse | None,
) -> web.StreamResponse:
    slot = None
    single = asked.tasks == 1  # several prompts: the engine's usage is one task's
    if gate.slots is not None and asked.id_slot is None and single:
        slot = gate.slots.take(asked.conversation)
    outcome = Outcome()
    clean = False
    sampling = gate.settings.sampling
    try:
        body = forwarded_body(asked, completion, slot, sampling)
    except BaseException:  # nothing reached the engine: nothing to wait for
        _release(gate, queue, ticket, slot)
        raise

    def again() -> bytes:  # for an engine that restarted: its slots may be fewer
        return forwarded_body(asked, completion, None, sampling)

    try:
        result = await _forward(gate, request, asked, body, outcome, started, again)
        clean = True
        return result
    finally:
        charge = request.get(CHARGE_KEY)
        if charge is not None:
            charge.engine_prompt_tokens, charge.engine_completion_tokens = (
                outcome.prompt,
                outcome.completion,
            )
            charge.engine_error = outcome.error
        if single:
            _account(gate, asked, outcome, slot if slot is not None else asked.id_slot)
        if clean:  # released now: a corrected charge would change nothing
            _release(gate, queue, ticket, slot)
        else:  # held until the engine's slot is idle: by the engine's own count
            if single and outcome.prompt is not None and outcome.prompt != prompt:
                queue.reconcile(ticket, outcome.prompt + completion)
            gate.spawn(_release_when_idle(gate, queue, ticket, slot))


def _release(gate: Gate, queue: AdmissionQueue, ticket: Ticket, slot: int | None) -> None:
    if gate.slots is not None:
        gate.slots.give(slot)
    queue.release(ticket)


async def _release_when_idle(
    gate: Gate, queue: AdmissionQueue, ticket: Ticket, slot: int | None
) -> None:
    """The client left mid-request: free the charge once the engine's slot is idle."""
    try:
        await gate.upstream.wait_idle(
            slot, lambda: max(0, queue.state.running - 1), gate.settings.slot_idle_wait_s
        )
    finally:
        _release(gate, queue, ticket, slot)


def _account(gate: Gate, asked: Asked, outcome: Outcome, slot: int | None) -> None:
    if outcome.processed is None:
        return
    cached = outcome.cached or 0
    gate.metrics.prompt_tokens.inc(outcome.processed + cached)
    gate.metrics.cached_tokens.inc(cached)
    if gate.reuse.record(asked.conversation, cached, outcome.processed, slot) is not None:
        gate.metrics.reprefill_alarms.inc()


async def _forward(
    gate: Gate,
    request: web.Request,
    asked: Asked,
    body: bytes,
    outcome: Outcome,
    started: web.StreamResponse | None,
    again: Callable[[], bytes],
) -> web.StreamResponse:
    async def keepalive() -> None:
        if started is not None:
            await started.write(KEEPALIVE)

    try:  # an engine restarting under the gate is waited for (homelab.gate.engine_wait)
        upstream = await post_when_up(
            gate.upstream, asked.route.path, body, again=again,
            wait_s=gate.settings.engine_wait_s, keepalive=keepalive,
            keepalive_s=gate.settings.keepalive_s,
        )  # fmt: skip
    except aiohttp.ClientError as error:
        gate.metrics.upstream_errors.labels(kind="unreachable").inc()
        message = f"The engine did not answer: {error}"
        if started is not None:
            return await _end_stream(started, asked, message, "server_error", "engine_unreachable")
        return error_reply(
            502,
            message,
            kind="server_error",
            code="engine_unreachable",
            anthropic=asked.route.anthropic,
        )
    try:
        if upstream.status == 401:  # the engine refused the gate's key: the gate's fault
            gate.metrics.upstream_errors.labels(kind="key").inc()
            if started is not None:
                code = "engine_key_refused"
                return await _end_stream(started, asked, ENGINE_KEY_REFUSED, "server_error", code)
            return engine_key_refused(anthropic=asked.route.anthropic)
        if upstream.status >= 400:
            gate.metrics.upstream_errors.labels(kind="status").inc()
        if upstream.content_type != "text/event-stream":
            status, data = engine_client_error(upstream.status, await upstream.read())
            outcome.update(outcome_of(data))
            kind = upstream.content_type
            if status >= 400 and asked.route.anthropic:
                data, kind = anthropic_engine_error(status, data), "application/json"
            if started is None:
                return web.Response(status=status, body=data, content_type=kind)
            # an answer that is not a stream, after the keep-alives: pass it on as one event
            event = b"event: error\n" if status >= 400 and asked.route.anthropic else b""
            await started.write(event + b"data: " + data.strip() + b"\n\n")
            await started.write_eof()
            return started
        response = started
        if response is None:
            response = web.StreamResponse(status=upstream.status, headers=SSE_HEADERS)
            await response.prepare(request)
        return await relay_stream(gate, request, asked, upstream, response, outcome)
    except BaseException:
        upstream.close()  # drop the connection: llama-server cancels the task
        raise
    finally:
        upstream.release()
