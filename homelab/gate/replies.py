"""The gate's own HTTP answers: OpenAI-shaped error bodies (Anthropic-shaped on
``/v1/messages``), with ``Retry-After`` where waiting helps."""

from __future__ import annotations

import json

from aiohttp import web

from homelab.gate.admission import Refusal

ANTHROPIC_KINDS = {
    "invalid_request_error": "invalid_request_error",
    "authentication_error": "authentication_error",
    "permission_error": "permission_error",
    "rate_limit_error": "rate_limit_error",
    "server_error": "api_error",
    "unavailable_error": "overloaded_error",
    "not_found_error": "not_found_error",
}


def error_body(status: int, message: str, kind: str, code: str | None, *, anthropic: bool) -> dict:
    if anthropic:
        return {
            "type": "error",
            "error": {"type": ANTHROPIC_KINDS.get(kind, "api_error"), "message": message},
        }
    return {"error": {"code": code or status, "message": message, "type": kind}}


def error_reply(
    status: int,
    message: str,
    *,
    kind: str,
    code: str | None = None,
    retry_after_s: int | None = None,
    anthropic: bool = False,
) -> web.Response:
    headers = {} if retry_after_s is None else {"Retry-After": str(retry_after_s)}
    return web.Response(
        status=status,
        body=json.dumps(error_body(status, message, kind, code, anthropic=anthropic)).encode(),
        content_type="application/json",
        headers=headers,
    )


ENGINE_KEY_REFUSED = (
    "The engine refused the gate's key for it (the engine's own key, made when homelab "
    "started it behind this gate): its record lost the key, or another program took its "
    "port. Run `homelab serve MODEL --replace` to start it again with a fresh key."
)
"""What a client hears when the engine answers the gate 401: a 502 (the gate's side is
wrong), never a 401 that would tell the client its own key was wrong."""


def engine_key_refused(*, anthropic: bool = False) -> web.Response:
    """The engine refused the gate's key (see :data:`ENGINE_KEY_REFUSED`)."""
    return error_reply(
        502, ENGINE_KEY_REFUSED, kind="server_error", code="engine_key_refused", anthropic=anthropic
    )


REFUSAL_STATUS = {
    Refusal.QUEUE_FULL: (429, "rate_limit_error"),
    Refusal.TIMEOUT: (503, "unavailable_error"),
    Refusal.TOO_LARGE: (413, "invalid_request_error"),
}


def refusal_reply(
    reason: Refusal, message: str, retry_after_s: int | None, *, anthropic: bool
) -> web.Response:
    status, kind = REFUSAL_STATUS[reason]
    return error_reply(
        status,
        message,
        kind=kind,
        code=reason.value,
        retry_after_s=None if reason is Refusal.TOO_LARGE else retry_after_s,
        anthropic=anthropic,
    )


ENGINE_CLIENT_MISTAKES = (
    b"[json.exception.",
    b"vector::_M_range_check",
    b"input is not supported",
)
"""What llama-server (b11312) says in a 500 that is the client's mistake: its JSON library
could not read a field (``[json.exception.type_error.302] type must be number, but is
array``), a token id past the vocabulary (``/detokenize``: ``vector::_M_range_check``), an
image or audio part sent to a model without a projector (``image input is not
supported``)."""


def engine_client_error(status: int, data: bytes) -> tuple[int, bytes]:
    """An engine's error answer, with a 500 that is the client's mistake made a 400.

    Why: llama-server (b11312) answers some client mistakes (:data:`ENGINE_CLIENT_MISTAKES`)
    on ``/tokenize``, ``/detokenize``, ``/apply-template``, its count endpoints and the
    completion routes with a 500 ``server_error`` (found by the gate fuzz): a client would
    retry it, and a monitor count it as the server's fault. The message is kept."""
    if status != 500 or not any(mistake in data[:300] for mistake in ENGINE_CLIENT_MISTAKES):
        return status, data
    try:
        sent = json.loads(data)
        message = str(sent["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = data.decode("utf-8", "replace")
    body = error_body(400, message, "invalid_request_error", None, anthropic=False)
    return 400, json.dumps(body).encode()


def anthropic_engine_error(status: int, data: bytes) -> bytes:
    """An engine's error answer on the Anthropic route, in Anthropic's shape.

    Why: llama-server (b11312) answers a bad ``/v1/messages`` request with its OpenAI-shaped
    error (``{"error": {"code", "message", "type"}}``); an Anthropic SDK reads
    ``{"type": "error", "error": {"type", "message"}}`` and would report a garbled error
    (found by the gate fuzz). Its message and kind are kept; a body that is no JSON error is
    passed as the message."""
    try:
        sent = json.loads(data)
    except ValueError:
        sent = None
    if isinstance(sent, dict) and sent.get("type") == "error":
        return data  # already Anthropic's shape
    error = sent.get("error") if isinstance(sent, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or data.decode("utf-8", "replace"))
        kind = str(error.get("type") or "")
    else:
        message, kind = data.decode("utf-8", "replace") or f"HTTP {status}", ""
    if kind not in ANTHROPIC_KINDS:
        kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps(error_body(status, message, kind, None, anthropic=True)).encode()


def sse_error(message: str, kind: str, code: str, *, anthropic: bool) -> bytes:
    """An error event for a stream that already answered 200 (a queued stream timing out)."""
    body = error_body(503, message, kind, code, anthropic=anthropic)
    data = json.dumps(body)
    return (f"event: error\ndata: {data}\n\n" if anthropic else f"data: {data}\n\n").encode()


def sse_engine_gone(message: str, *, path: str, anthropic: bool) -> bytes:
    """The last event of a stream the engine stopped in the middle of (it died, or was
    killed), in the route's own shape, so the client knows the answer is cut and may retry:
    Anthropic's ``error`` event, the Responses API's ``response.failed``, else an OpenAI
    ``error`` data line."""
    code = "engine_gone"
    if path == "/v1/responses":
        failed = {"status": "failed", "error": {"code": code, "message": message}}
        data = json.dumps({"type": "response.failed", "response": failed})
        return f"event: response.failed\ndata: {data}\n\n".encode()
    return sse_error(message, "server_error", code, anthropic=anthropic)
