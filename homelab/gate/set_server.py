"""The gate's application in front of a set of models (:class:`ModelPool`): the request's
``model`` picks the model, its own gate admits it (its slots, its budget), and a model that
is not loaded is loaded first while the request waits in its line.

- ``/v1/models`` and ``/models`` list the whole set: each id with its aliases and whether it
  is loaded; a request that names no model goes to the first listed (the most wanted);
- a name that is no model's id or alias is answered **404** ``model_not_found`` in the
  route's shape, listing the ids (the name is never used as a path or a key: only compared);
- a full line is **429** ``queue_full``, a wait past the queue timeout **503** ``timeout``
  (both with ``Retry-After``); a model whose engine failed to load answers its requests
  **503** ``model_load_failed`` with the engine's reason, the other models unaffected;
- ``/metrics``: the set's (``homelab_gate_model_*``: loaded, swaps, unloads, waits), then
  the admission's, summed over the models.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from homelab.gate.access_log import access_log
from homelab.gate.admission import Refusal
from homelab.gate.errors import BadRequest
from homelab.gate.forward import complete
from homelab.gate.http_errors import json_errors
from homelab.gate.model_pool import FAILED_HOLD_S, LoadFailed, Member, ModelPool
from homelab.gate.replies import error_reply, refusal_reply
from homelab.gate.requests import ROUTES, Route, parse
from homelab.gate.server import PASSTHROUGH, SETTINGS_KEY, auth, passthrough
from homelab.gate.state import STATE_PATH, GateState
from homelab.gate.trust import cors_headers, trust_middleware
from homelab.gate.waiting import Refused

POOL_KEY: web.AppKey[ModelPool] = web.AppKey("pool", ModelPool)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SHOWN_NAME_CHARS = 64
"""A name no model answers to is quoted this long at most (a huge ``model`` string is not
echoed back)."""
LISTED = ("/v1/models", "/models")


def build_set_app(pool: ModelPool) -> web.Application:
    settings = pool.settings
    app = web.Application(
        middlewares=[access_log, json_errors, trust_middleware(settings), auth],
        client_max_size=64 * 1024 * 1024,
    )
    app[POOL_KEY] = pool
    app[SETTINGS_KEY] = settings
    if settings.allowed_origins:
        app.on_response_prepare.append(cors_headers)
    for route in ROUTES.values():
        app.router.add_post(route.path, _completion(route))
    for method, path in PASSTHROUGH:
        app.router.add_route(method, path, _listing if path in LISTED else _passthrough)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get(STATE_PATH, _state)
    return app


def _completion(route: Route) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        pool = request.app[POOL_KEY]
        try:
            asked = parse(route, await request.read())
        except BadRequest as error:
            pool.gate_metrics.bad_requests.inc()
            return error_reply(
                error.status, error.message, kind=error.kind, anthropic=route.anthropic
            )
        return await _served(pool, request, asked.body.get("model"), route.anthropic, route)

    return handle


async def _passthrough(request: web.Request) -> web.StreamResponse:
    """``/tokenize``, ``/props``, ``/slots``, the count routes: the model the query
    (``?model=``) or the body names, else a loaded one (else the first listed)."""
    pool = request.app[POOL_KEY]
    name: object = request.query.get("model")
    if name is None and request.method == "POST":
        try:
            body = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError):
            body = None  # the passthrough says what is wrong with it
        name = body.get("model") if isinstance(body, dict) else None
    if name is None:
        loaded = pool.any_loaded()
        name = loaded.model.id if loaded is not None else None
    anthropic = request.path == "/v1/messages/count_tokens"
    return await _served(pool, request, name, anthropic, None)


async def _served(
    pool: ModelPool, request: web.Request, name: object, anthropic: bool, route: Route | None
) -> web.StreamResponse:
    """``request`` answered by the model ``name`` names (loaded for it first)."""
    if name is None or name == "":
        member: Member | None = pool.default()
    elif not isinstance(name, str):
        return error_reply(
            400,
            "'model' must be a string: one of the ids in /v1/models.",
            kind="invalid_request_error",
            anthropic=anthropic,
        )
    else:
        member = pool.resolve(name)
    if member is None:
        return _unknown(pool, str(name), anthropic)
    try:
        gate = await pool.acquire(member)
    except Refused as refused:
        return _refused(member, refused, anthropic)
    except LoadFailed as failed:
        return error_reply(
            503,
            f"The model {member.model.id!r} could not be loaded: {failed}",
            kind="unavailable_error",
            code="model_load_failed",
            retry_after_s=int(FAILED_HOLD_S),
            anthropic=anthropic,
        )
    try:
        if route is None:
            return await passthrough(gate, request)
        return await complete(gate, request, route)
    finally:
        pool.release(member)


def _unknown(pool: ModelPool, name: str, anthropic: bool) -> web.Response:
    shown = ascii(name[:SHOWN_NAME_CHARS]) + ("…" if len(name) > SHOWN_NAME_CHARS else "")
    known = ", ".join(pool.order)
    return error_reply(
        404,
        f"The model {shown} is not served here; the models are: {known} (and their aliases, "
        "see /v1/models).",
        kind="not_found_error" if anthropic else "invalid_request_error",
        code="model_not_found",
        anthropic=anthropic,
    )


def _refused(member: Member, refused: Refused, anthropic: bool) -> web.Response:
    ident = member.model.id
    if refused.reason is Refusal.QUEUE_FULL:
        message = f"Too many requests are waiting for the model {ident!r} to load; retry later."
    else:
        message = f"The model {ident!r} was not loaded in time (others drain first); retry."
    return refusal_reply(refused.reason, message, refused.retry_after_s, anthropic=anthropic)


async def _listing(request: web.Request) -> web.StreamResponse:
    """Every model of the set: OpenAI's list, with homelab's aliases and state."""
    pool = request.app[POOL_KEY]
    data = [
        {
            "id": model["id"],
            "object": "model",
            "owned_by": "homelab",
            "aliases": model["aliases"],
            "status": {"value": model["state"]},
            "loaded": model["loaded"],
        }
        for model in pool.models_json()
    ]
    return web.json_response({"object": "list", "data": data})


async def _health(request: web.Request) -> web.StreamResponse:
    """200 while the gate runs: models load on demand; each one's state is in the body."""
    pool = request.app[POOL_KEY]
    return web.json_response({"status": "ok", "models": pool.models_json()})


async def _metrics(request: web.Request) -> web.StreamResponse:
    pool = request.app[POOL_KEY]
    text = pool.metrics.text() + b"\n" + pool.gate_metrics.text()
    return web.Response(
        body=text, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
    )


def set_state(pool: ModelPool, url: str | None) -> GateState:
    """The set's gate as one state: its models' admission summed, and each model."""
    states = [m.gate.state() for m in pool.members.values() if m.gate is not None]
    refused = {r.value: 0 for r in Refusal}
    for state in states:
        for reason, n in state.refused.items():
            refused[reason] = refused.get(reason, 0) + n
    return GateState(
        url=url,
        engine_url=", ".join(s.engine_url for s in states),
        charged_tokens=sum(s.charged_tokens for s in states),
        running=sum(s.running for s in states),
        queued=sum(s.queued for s in states) + sum(m.waiting for m in pool.members.values()),
        admitted=sum(s.admitted for s in states),
        refused=refused,
        upstream_errors=sum(s.upstream_errors for s in states),
        models=tuple(pool.models_json()),
    )


async def _state(request: web.Request) -> web.StreamResponse:
    pool = request.app[POOL_KEY]
    return web.json_response(set_state(pool, pool.url).to_json())
