"""The gate's aiohttp application: the API key check, the completion routes
(:mod:`homelab.gate.forward`), ``/health`` (the engine's readiness through the gate),
``/metrics`` (the gate's own, then the engine's) and the engine's other endpoints passed
through unchanged (``/v1/models``, ``/tokenize``, ``/props``, ``/slots``, ...)."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from homelab.gate.access_log import access_log
from homelab.gate.core import Gate
from homelab.gate.errors import BadRequest
from homelab.gate.forward import complete
from homelab.gate.http_errors import anthropic_path, json_errors
from homelab.gate.json_body import engine_bytes, load_body
from homelab.gate.replies import (
    anthropic_engine_error,
    engine_client_error,
    engine_key_refused,
    error_reply,
)
from homelab.gate.requests import ROUTES, Route, parse
from homelab.gate.settings import GateSettings
from homelab.gate.state import STATE_PATH
from homelab.gate.trust import cors_headers, trust_middleware

GATE_KEY: web.AppKey[Gate] = web.AppKey("gate", Gate)
SETTINGS_KEY: web.AppKey[GateSettings] = web.AppKey("gate_settings", GateSettings)
PASSTHROUGH = (
    ("GET", "/v1/models"),
    ("GET", "/models"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/apply-template"),
    ("GET", "/props"),
    ("GET", "/slots"),
    ("POST", "/v1/chat/completions/input_tokens"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses/input_tokens"),
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(gate: Gate) -> web.Application:
    app = web.Application(
        middlewares=[access_log, json_errors, trust_middleware(gate.settings), auth],
        client_max_size=64 * 1024 * 1024,
    )
    app[GATE_KEY] = gate
    app[SETTINGS_KEY] = gate.settings
    if gate.settings.allowed_origins:  # CORS only when a person allowed some origin
        app.on_response_prepare.append(cors_headers)
    for route in ROUTES.values():
        app.router.add_post(route.path, _completion(route))
    for method, path in PASSTHROUGH:
        if method == "GET":  # takes HEAD too (the GET's headers), as the gate's own GETs
            app.router.add_get(path, _passthrough)
        else:
            app.router.add_route(method, path, _passthrough)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get(STATE_PATH, _state)
    return app


@web.middleware
async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.app[SETTINGS_KEY].api_key
    if key is not None and not _key_matches(request, key):
        return error_reply(
            401,
            "This gate needs an API key: send it as 'Authorization: Bearer KEY' "
            "(or 'x-api-key: KEY').",
            kind="authentication_error",
            code="invalid_api_key",
            anthropic=anthropic_path(request.path),
        )
    return await handler(request)


def _key_matches(request: web.Request, key: str) -> bool:
    """Whether the request carries ``key``. Header bytes that are not UTF-8 (aiohttp hands
    them over as surrogate escapes) are compared as the bytes sent: they never match."""
    sent = request.headers.get("x-api-key")
    auth = request.headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        sent = auth[7:].strip()
    if sent is None:
        return False
    return hmac.compare_digest(sent.encode("utf-8", "surrogateescape"), key.encode())


def _completion(route: Route) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        return await complete(request.app[GATE_KEY], request, route)

    return handle


COUNTED = {r.count_path: r for r in ROUTES.values() if not r.text_prompt}
"""The count endpoints passed through, by the path of the route whose bodies they count."""
ANTHROPIC_PASSTHROUGH = "/v1/messages/count_tokens"
"""The one passed-through endpoint of the Anthropic API: its errors in Anthropic's shape."""


async def _passthrough(request: web.Request) -> web.StreamResponse:
    return await passthrough(request.app[GATE_KEY], request)


async def passthrough(gate: Gate, request: web.Request) -> web.StreamResponse:
    """The engine's answer to the same request. A POST body must be JSON the engine can
    read (:func:`~homelab.gate.json_body.load_body`): llama-server answers an empty,
    truncated or non-JSON body, ``NaN`` or a number past a double with a 500
    ``server_error`` (found by the gate fuzz), so the gate refuses those as a 400 (and a
    count endpoint's body as its route would: ``messages`` missing was a 500); one in
    UTF-16 or with a BOM (JSON Python reads) goes on as plain UTF-8; and the engine's 500
    for a field of the wrong type is answered 400 (:func:`engine_client_error`)."""
    anthropic = request.path == ANTHROPIC_PASSTHROUGH
    method = "GET" if request.method == "HEAD" else request.method  # aiohttp drops the body
    body = await request.read() if request.can_read_body else None
    route = COUNTED.get(request.path)
    if request.method == "POST":
        try:  # a count endpoint takes its route's bodies: checked as the route checks them
            value = load_body(body or b"") if route is None else parse(route, body or b"").body
            body = engine_bytes(body or b"", value)
        except BadRequest as error:
            gate.metrics.bad_requests.inc()
            return error_reply(error.status, error.message, kind=error.kind, anthropic=anthropic)
    kind = request.headers.get("Content-Type", "")
    headers = {
        "Content-Type": kind if kind.isprintable() and kind.isascii() else "application/json"
    }
    try:
        async with gate.upstream.aux.request(
            method, gate.upstream.url + request.path_qs, data=body, headers=headers
        ) as resp:
            if resp.status == 401:  # the engine refused the gate's key, not the client's
                gate.metrics.upstream_errors.labels(kind="key").inc()
                return engine_key_refused(anthropic=anthropic)
            status, data = engine_client_error(resp.status, await resp.read())
            kind = resp.content_type
            if anthropic and status >= 400:
                data, kind = anthropic_engine_error(status, data), "application/json"
            return web.Response(status=status, body=data, content_type=kind)
    except (aiohttp.ClientError, TimeoutError) as error:
        gate.metrics.upstream_errors.labels(kind="unreachable").inc()
        return error_reply(
            502,
            f"The engine did not answer: {error}",
            kind="server_error",
            code="engine_unreachable",
            anthropic=anthropic,
        )


HEALTH_TIMEOUT_S = 2.0
"""How long ``/health`` waits for the engine: a stopped (SIGSTOP) or hung engine is said
down in this time, not after the status calls' 10 s (a health check must answer fast)."""


async def _health(request: web.Request) -> web.StreamResponse:
    """The engine's ``/health`` as the gate reaches it (503 while loading or down). When the
    engine does not answer, the gate (which answers) says which side is down and why."""
    gate = request.app[GATE_KEY]
    timeout = aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)
    try:
        async with gate.upstream.aux.get(gate.upstream.url + "/health", timeout=timeout) as resp:
            data = await resp.read()
            return web.Response(status=resp.status, body=data, content_type=resp.content_type)
    except TimeoutError:
        why = f"it did not answer within {HEALTH_TIMEOUT_S:g} s (stopped, hung or overloaded)"
    except aiohttp.ClientError as error:
        why = f"{type(error).__name__}: {error}"
    return error_reply(
        503,
        f"The gate is up; the engine at {gate.upstream.url} is down: {why}.",
        kind="unavailable_error",
        code="engine_down",
        retry_after_s=2,
    )


async def _state(request: web.Request) -> web.StreamResponse:
    """The gate's state now (queue, charges, refusals, cache hit rate, alarms)."""
    return web.json_response(request.app[GATE_KEY].state().to_json())


async def _metrics(request: web.Request) -> web.StreamResponse:
    """The gate's metrics, then the engine's (when it serves them)."""
    gate = request.app[GATE_KEY]
    text = gate.metrics.text()
    try:
        async with gate.upstream.aux.get(gate.upstream.url + "/metrics") as resp:
            if resp.status == 200:
                text += b"\n" + await resp.read()
    except (aiohttp.ClientError, TimeoutError):
        pass
    return web.Response(
        body=text, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )
