"""Who may drive the gate from a web browser: the ``Host`` and ``Origin`` checks, and CORS
only for the origins a person allowed.

Why: a gate on loopback needs no key by default, and any web page the user opens can send
it requests — a form or a ``no-cors`` fetch posts ``Content-Type: text/plain`` JSON with no
preflight (blind CSRF) — or read its answers through DNS rebinding (the page's own name
re-resolved to 127.0.0.1, so the browser counts the gate as the page's origin; the request
still names the page's host in ``Host``). Agents and SDKs send no ``Origin`` and a ``Host``
naming the address they dialled; browsers always send ``Origin`` on a cross-origin POST.

So: on a loopback gate the ``Host`` must be a loopback name or address (or the gate's own
host setting); on any gate a request with an ``Origin`` not in ``allowed_origins`` is
refused (403), and only an allowed origin gets CORS headers (and its preflights answered).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from homelab.gate.http_errors import anthropic_path
from homelab.gate.replies import error_reply
from homelab.gate.settings import GateSettings, is_loopback_host

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PREFLIGHT_MAX_AGE_S = 600
ALLOWED_METHODS = "GET, POST, OPTIONS"


def host_name(header: str) -> str:
    """The name or address in a ``Host`` header, without its port (IPv6 brackets off)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header[1:]
    name = header.rpartition(":")[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def host_allowed(settings: GateSettings, header: str | None) -> bool:
    """A request without ``Host`` (HTTP/1.0) names nothing to check; a gate off loopback
    is reached by names the gate cannot know (and needs a key there)."""
    if header is None or not is_loopback_host(settings.host):
        return True
    name = host_name(header)
    return is_loopback_host(name) or name.lower() == settings.host.lower()


def normal_origin(origin: str) -> str:
    """An origin as compared: lower case, no trailing slash."""
    return origin.strip().rstrip("/").lower()


def trust_middleware(settings: GateSettings) -> Middleware:
    """The middleware that refuses foreign hosts and origins and answers preflights."""
    allowed = frozenset(normal_origin(o) for o in settings.allowed_origins)

    @web.middleware
    async def trust(request: web.Request, handler: Handler) -> web.StreamResponse:
        anthropic = anthropic_path(request.path)
        host = request.headers.get("Host")
        if not host_allowed(settings, host):
            return error_reply(
                403,
                f"This gate listens on {settings.host} and answers only requests addressed "
                f"to a loopback name (127.0.0.1, localhost, ::1), not {host!r}: a web page "
                "must not reach it through a name of its own (DNS rebinding).",
                kind="permission_error",
                code="forbidden_host",
                anthropic=anthropic,
            )
        origin = request.headers.get("Origin")
        if origin is not None and normal_origin(origin) not in allowed:
            return error_reply(
                403,
                f"Requests from web pages are refused: the origin {origin!r} is not in the "
                "gate's allowed_origins (agents and SDKs send no Origin).",
                kind="permission_error",
                code="forbidden_origin",
                anthropic=anthropic,
            )
        if origin is not None and request.method == "OPTIONS" and _routed(request):
            return web.Response(status=204, headers=_preflight(request))
        return await handler(request)

    return trust


def _routed(request: web.Request) -> bool:
    """Whether a route has the request's path (a preflight for any other is a 404)."""
    return not isinstance(request.match_info.http_exception, web.HTTPNotFound)


def _preflight(request: web.Request) -> dict[str, str]:
    asked = request.headers.get("Access-Control-Request-Headers", "")
    return {
        "Access-Control-Allow-Methods": ALLOWED_METHODS,
        "Access-Control-Allow-Headers": asked if asked.isascii() else "",
        "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
    }


async def cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: an answer to an allowed origin says so (streams included).
    Only allowed origins get here with an ``Origin``: the middleware refused the rest."""
    origin = request.headers.get("Origin")
    if origin is not None and response.status != 403:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
