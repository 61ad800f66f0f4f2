"""What a completion request asks, and the cap the gate writes into it.

Routes and the fields llama-server (b11312) reads for the completion length:

- ``/v1/chat/completions``: ``max_tokens`` or ``max_completion_tokens``; prompt tokens
  counted exactly by ``/v1/chat/completions/input_tokens`` (chat template applied).
- ``/v1/messages`` (Anthropic): ``max_tokens``; counted by ``/v1/messages/count_tokens``.
- ``/v1/completions``: ``max_tokens``; ``/completion``: ``n_predict`` (``-1``: unlimited);
  both counted by ``/tokenize`` of the prompt.

Without a cap llama-server generates until end of text or context (``n_predict = -1``), so
the gate's charge would lie; the gate therefore writes ``min(asked, max_tokens_cap,
ceiling − prompt)`` into every field the client used (``max_tokens`` when it used none).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from homelab.gate.errors import BadRequest


@dataclass(frozen=True, slots=True)
class Route:
    path: str
    cap_fields: tuple[str, ...]
    """Fields that bound the completion; the first is written when the client sent none."""
    count_path: str
    """The engine endpoint that counts the prompt's tokens."""
    anthropic: bool = False


ROUTES: dict[str, Route] = {
    r.path: r
    for r in (
        Route(
            "/v1/chat/completions",
            ("max_tokens", "max_completion_tokens", "n_predict"),
            "/v1/chat/completions/input_tokens",
        ),
        Route("/v1/messages", ("max_tokens",), "/v1/messages/count_tokens", anthropic=True),
        Route("/v1/completions", ("max_tokens", "n_predict"), "/tokenize"),
        Route("/completion", ("n_predict", "max_tokens"), "/tokenize"),
    )
}

TEXT_PREFIX_CHARS = 1000
"""A text prompt's conversation key is the hash of its first characters."""


@dataclass(frozen=True, slots=True)
class Asked:
    """A parsed completion request."""

    route: Route
    body: dict[str, Any]
    stream: bool
    max_tokens: int | None
    """The smallest completion bound the client sent; None: none (or unlimited)."""
    conversation: str | None
    """Hash of the conversation's first messages (system + first user); None: no text."""
    id_slot: int | None
    """A slot the client pinned itself."""

    def count_body(self) -> dict[str, Any]:
        """The body for the route's token-count endpoint."""
        if self.route.count_path == "/tokenize":
            prompt = self.body.get("prompt", "")
            return {"content": prompt, "add_special": True}
        return {k: v for k, v in self.body.items() if k not in ("stream", "stream_options")}

    def estimate_tokens(self) -> int:
        """A conservative prompt size without the engine: one token per UTF-8 byte of the
        request's text parts (a BPE token is at least one byte; the JSON punctuation covers
        the chat template's tokens)."""
        if self.route.count_path == "/tokenize":
            parts: Any = self.body.get("prompt", "")
        else:
            parts = {k: self.body.get(k) for k in ("system", "messages", "tools") if k in self.body}
        return len(json.dumps(parts, ensure_ascii=False).encode()) + 16


def parse(route: Route, raw: bytes) -> Asked:
    """Read a request body.

    Raises:
        BadRequest: not a JSON object, or a field of the wrong kind.
    """
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequest(f"The request body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    if route.count_path == "/tokenize":
        if "prompt" not in body:
            raise BadRequest("The request has no 'prompt'.")
    elif not isinstance(body.get("messages"), list) or not body["messages"]:
        raise BadRequest("The request needs a non-empty 'messages' list.")
    bounds = []
    for name in route.cap_fields:
        if name in body and body[name] is not None:
            value = body[name]
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadRequest(f"'{name}' must be a whole number, not {value!r}.")
            if value >= 0:
                bounds.append(value)
    id_slot = body.get("id_slot")
    return Asked(
        route=route,
        body=body,
        stream=body.get("stream") is True,
        max_tokens=min(bounds) if bounds else None,
        conversation=conversation_key(route, body),
        id_slot=id_slot if isinstance(id_slot, int) and id_slot >= 0 else None,
    )


def conversation_key(route: Route, body: dict[str, Any]) -> str | None:
    """A short hash of what starts the conversation: the system prompt and the first user
    message (for text prompts, their first characters)."""
    if route.count_path == "/tokenize":
        prompt = body.get("prompt")
        head: Any = prompt[:TEXT_PREFIX_CHARS] if isinstance(prompt, str) else None
    else:
        head = [body.get("system")] if "system" in body else []
        for message in body.get("messages") or ():
            head.append(message)
            if isinstance(message, dict) and message.get("role") == "user":
                break
    if not head:
        return None
    text = json.dumps(head, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def completion_cap(asked: Asked, prompt_tokens: int, *, cap: int, ceiling: int) -> int:
    """The completion tokens charged and allowed: ``min(asked, cap, ceiling − prompt)``
    (at least 0; 0 means the prompt alone fills the ceiling)."""
    wanted = cap if asked.max_tokens is None else min(asked.max_tokens, cap)
    return max(0, min(wanted, ceiling - prompt_tokens))


def forwarded_body(asked: Asked, completion: int, id_slot: int | None) -> bytes:
    """The body sent to the engine: the cap written into every length field the client used
    (the first of the route's fields when it used none), and the pinned slot."""
    body = dict(asked.body)
    used = [name for name in asked.route.cap_fields if body.get(name) is not None]
    for name in used or asked.route.cap_fields[:1]:
        value = body.get(name)
        if not isinstance(value, int) or value < 0 or value > completion:
            body[name] = completion
    if id_slot is not None and asked.id_slot is None:
        body["id_slot"] = id_slot
    return json.dumps(body, ensure_ascii=False).encode()
