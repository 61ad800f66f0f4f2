"""Every answer of the gate in JSON, in its route family's error shape: the requests no
route takes (404, 405 with ``Allow``, a body past the size bound), ``OPTIONS`` on a route,
and the requests aiohttp refuses before any route (a malformed request line or header) or
that crash a handler (500).

Why: aiohttp answers these in plain text (``404: Not Found``, ``400, message: ...``), which
an OpenAI or Anthropic SDK reports as a garbled error; and it logs each request it cannot
parse with a traceback, one per bad request in the serve's terminal. Here a client's
mistake is one warning line (rate-limited with the gate's other errors:
:mod:`homelab.gate.log_file`), a crash one error with its traceback.

What is said never echoes the request but for its method and (cut short, printable) path:
``TRACE`` is answered 405 like any other method no route takes.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from homelab.gate.replies import error_reply

log = logging.getLogger("homelab.gate.http")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SHOWN_PATH = 120
"""The most characters of an unknown path said back."""


def anthropic_path(path: str) -> bool:
    """The Anthropic API's routes (``/v1/messages`` and below): errors in its shape."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def shown_path(path: str) -> str:
    """``path`` as said back: printable ASCII (others escaped), at most :data:`SHOWN_PATH`."""
    text = ascii(path)[1:-1]
    return text if len(text) <= SHOWN_PATH else text[:SHOWN_PATH] + "…"


def _known_paths(request: web.Request) -> list[str]:
    paths = {r.canonical for r in request.app.router.resources()}
    return sorted(p for p in paths if not p.startswith("/_"))


def _not_found(request: web.Request) -> web.Response:
    hint = ""
    if len(request.path) <= 200:
        near = difflib.get_close_matches(request.path, _known_paths(request), n=1, cutoff=0.8)
        hint = f" Did you mean {near[0]}?" if near else ""
    return error_reply(
        404,
        f"The gate has no route {shown_path(request.path)}.{hint} "
        "Its completion routes: /v1/chat/completions, /v1/completions, /v1/messages, "
        "/v1/responses, /completion.",
        kind="invalid_request_error",
        code="not_found",
        anthropic=anthropic_path(request.path),
    )


def _wrong_method(request: web.Request, error: web.HTTPMethodNotAllowed) -> web.Response:
    allowed = ", ".join(sorted(error.allowed_methods | {"OPTIONS"}))
    if request.method == "OPTIONS":  # what the route takes (a CORS preflight is trust's)
        return web.Response(status=204, headers={"Allow": allowed})
    reply = error_reply(
        405,
        f"{shown_path(request.path)} takes {allowed}, not this method.",
        kind="invalid_request_error",
        code="method_not_allowed",
        anthropic=anthropic_path(request.path),
    )
    reply.headers["Allow"] = allowed
    return reply


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (no route, wrong method, a body past ``client_max_size``)
    answered in the route family's JSON shape."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as error:
        return _wrong_method(request, error)
    except web.HTTPNotFound:
        return _not_found(request)
    except web.HTTPRequestEntityTooLarge as error:
        return error_reply(
            413,
            f"The body is larger than the gate takes ({error.text or 'its size bound'}).",
            kind="invalid_request_error",
            code="body_too_large",
            anthropic=anthropic_path(request.path),
        )
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return error_reply(
            error.status,
            error.reason,
            kind="invalid_request_error" if error.status < 500 else "server_error",
            anthropic=anthropic_path(request.path),
        )


class GateProtocol(RequestHandler):
    """aiohttp's connection handler with its error answers in JSON (OpenAI's shape: a
    request it cannot parse names no route) and one log line each: a warning without
    traceback for a request it could not parse, an error with it for a handler's crash."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # part of an answer went out: nothing to add
            raise ConnectionError("Response is sent already, cannot send an error answer")
        if status >= 500:
            name = type(exc).__name__ if exc is not None else "error"
            log.error(f"the gate failed on a request ({name})", exc_info=exc)  # a kind each
            text = "The gate failed on this request (its log says why); retry."
            kind = "server_error"
        else:
            name = type(exc).__name__ if exc is not None else "error"
            log.warning("a request the gate could not read (%s): %s", name, _reason(message))
            text = f"The gate could not read this HTTP request ({name}): {_reason(message)}."
            kind = "invalid_request_error"
        response = error_reply(status, text, kind=kind, code=None)
        response.force_close()
        return response


def _reason(message: str | None) -> str:
    """aiohttp's parser message without the bytes it quotes (never echoed): its first
    clause, printable, short."""
    text = re.split(r"[:'\"\n(]", message or "", maxsplit=1)[0].strip() or "malformed"
    return shown_path(text)[:80]
