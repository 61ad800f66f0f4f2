"""What a completion request asks, and the cap the gate writes into it.

Routes and the fields llama-server (b11312) reads for the completion length:

- ``/v1/chat/completions``: ``max_tokens`` or ``max_completion_tokens``; prompt tokens
  counted exactly by ``/v1/chat/completions/input_tokens`` (chat template applied).
- ``/v1/messages`` (Anthropic): ``max_tokens``; counted by ``/v1/messages/count_tokens``.
- ``/v1/responses`` (OpenAI Responses, which Codex speaks): ``max_output_tokens`` (also
  ``max_tokens``, ``n_predict``: the engine takes the smallest); counted by
  ``/v1/responses/input_tokens``.
- ``/v1/completions``: ``max_tokens``; ``/completion``: ``n_predict`` (``-1``: unlimited);
  both counted by ``/tokenize`` of the prompt. A list of prompts runs as one engine task
  per prompt, each charged its own prompt and completion; the prompts are counted in one
  ``/tokenize`` call (:data:`SEPARATOR`).

``n`` (all but the Anthropic route) asks for that many completions of each prompt;
llama-server runs each as a task of its own, on a slot of its own, so the gate charges it
as ``n`` tasks.

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
from homelab.gate.json_body import load_body
from homelab.gate.sampling import SamplingDefaults, missing


@dataclass(frozen=True, slots=True)
class Route:
    path: str
    cap_fields: tuple[str, ...]
    """Fields that bound the completion; the first is written when the client sent none."""
    count_path: str
    """The engine endpoint that counts the prompt's tokens."""
    prompt_field: str
    """The body's (required) field of messages or prompt text."""
    system_field: str | None = None
    """A field of its own for the system prompt."""
    anthropic: bool = False
    sampling_fields: tuple[str, ...] | None = None
    """The sampling settings the engine reads on this route (None: all of
    :data:`~homelab.gate.sampling.KNOWN`)."""

    @property
    def text_prompt(self) -> bool:
        """A raw text prompt (counted by ``/tokenize``), not a chat."""
        return self.count_path == "/tokenize"


ANTHROPIC_SAMPLING = ("temperature", "top_p", "top_k")
"""What llama-server's Anthropic route passes on to its sampler (``seed`` and ``min_p`` are
dropped there: ``server_chat_convert_anthropic_to_oai``, b11312)."""

ROUTES: dict[str, Route] = {
    r.path: r
    for r in (
        Route(
            "/v1/chat/completions",
            ("max_tokens", "max_completion_tokens", "n_predict"),
            "/v1/chat/completions/input_tokens",
            "messages",
        ),
        Route(
            "/v1/messages",
            ("max_tokens",),
            "/v1/messages/count_tokens",
            "messages",
            "system",
            anthropic=True,
            sampling_fields=ANTHROPIC_SAMPLING,
        ),
        Route(
            "/v1/responses",
            ("max_output_tokens", "max_tokens", "n_predict"),
            "/v1/responses/input_tokens",
            "input",
            "instructions",
        ),
        Route("/v1/completions", ("max_tokens", "n_predict"), "/tokenize", "prompt"),
        Route("/completion", ("n_predict", "max_tokens"), "/tokenize", "prompt"),
    )
}

TEXT_PREFIX_CHARS = 1000
"""A text prompt's conversation key is the hash of its first characters."""
_BODY_JSON = json.JSONEncoder(ensure_ascii=False).encode
SEPARATOR = -1
"""Between the prompts of a list counted in one ``/tokenize`` call: llama-server (b11312)
passes token ids in ``content`` through unchecked, and no text tokenizes to -1, so its
answer splits back into the prompts."""


@dataclass(frozen=True, slots=True)
class Asked:
    """A parsed completion request."""

    route: Route
    body: dict[str, Any]
    stream: bool
    max_tokens: int | None
    """The smallest completion bound the client sent, at least 1 (llama-server generates
    a token for ``max_tokens: 0``; charged 0 it was refused 413 as a prompt that "could
    never run", found by the gate fuzz); None: none (or unlimited)."""
    conversation: str | None
    """Hash of the conversation's first messages (system + first user); None: no text."""
    id_slot: int | None
    """A slot the client pinned itself."""
    prompts: tuple[Any, ...] = ()
    """A text route's prompts, one per engine task (a list of prompts runs as that many
    tasks, each with its own completion); empty for chat routes (one task)."""
    raw: bytes = b""
    """The body as the client sent it."""
    n: int = 1
    """Completions asked of each prompt (``n``): each is an engine task of its own."""

    @property
    def tasks(self) -> int:
        """The engine tasks this request becomes (each takes a slot and its own charge)."""
        return max(1, len(self.prompts)) * self.n

    def count_body(self) -> dict[str, Any] | None:
        """The body for the route's token-count endpoint: one per request, a list of
        prompts in one ``/tokenize`` call (split back by :meth:`split_counts`). None: the
        engine cannot count them in one call (a prompt neither text nor token ids)."""
        if not self.route.text_prompt:
            return {k: v for k, v in self.body.items() if k not in ("stream", "stream_options")}
        if len(self.prompts) == 1:
            return {"content": self.prompts[0], "add_special": True}
        if not all(isinstance(p, str) or _token_ids(p) for p in self.prompts):
            return None
        content: list[Any] = [""]  # the empty first piece: the special tokens each prompt gets
        for prompt in self.prompts:
            if isinstance(prompt, str):
                content += [SEPARATOR, prompt]
        return {"content": content, "add_special": True}

    def split_counts(self, tokens: list[Any]) -> list[int] | None:
        """Each prompt's tokens, from ``/tokenize``'s answer to :meth:`count_body` of a list
        (token-id prompts counted here); None when the answer does not split as sent."""
        pieces: list[int] = [0]
        for token in tokens:
            if token == SEPARATOR:
                pieces.append(0)
            else:
                pieces[-1] += 1
        texts = iter(pieces[1:])
        if len(pieces) - 1 != sum(isinstance(p, str) for p in self.prompts):
            return None
        return [next(texts) + pieces[0] if isinstance(p, str) else len(p) for p in self.prompts]

    def per_task(self, prompts: list[int]) -> list[int]:
        """Each prompt's size once per task (``n`` tasks of each prompt)."""
        return [size for size in prompts for _ in range(self.n)]

    def estimate_tokens(self) -> list[int]:
        """Conservative prompt sizes without the engine, one per task: one token per byte
        (a BPE token is at least one byte). One prompt: the whole body's bytes (its JSON
        punctuation and other fields cover the chat template's tokens); several: each
        prompt's JSON bytes."""
        if len(self.prompts) <= 1:
            return self.per_task([len(self.raw) + 16])
        sizes = [len(json.dumps(p, ensure_ascii=False).encode()) + 16 for p in self.prompts]
        return self.per_task(sizes)


def parse(route: Route, raw: bytes) -> Asked:
    """Read a request body.

    Raises:
        BadRequest: not a JSON object (or one :func:`~homelab.gate.json_body.load_body`
            refuses), or a field of the wrong kind.
    """
    body = load_body(raw)
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    prompts = _prompts(route, body)
    bounds = []
    for name in route.cap_fields:
        value = body.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise BadRequest(f"'{name}' must be a whole number, not {value!r}.")
            if value >= 0:  # 0 too generates one token in llama-server (b11312)
                bounds.append(max(value, 1))
    id_slot = body.get("id_slot")
    n = 1 if route.anthropic else body.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise BadRequest(f"'n' must be a whole number of at least 1, not {n!r}.")
    if n > 1 and any(_empty(prompt) for prompt in prompts):
        raise BadRequest(EMPTY_WITH_N)
    return Asked(
        route=route,
        body=body,
        stream=body.get("stream") is True,
        max_tokens=min(bounds) if bounds else None,
        conversation=conversation_key(route, body) if len(prompts) <= 1 else None,
        id_slot=id_slot if isinstance(id_slot, int) and id_slot >= 0 else None,
        prompts=prompts,
        raw=raw,
        n=n,
    )


def _prompts(route: Route, body: dict[str, Any]) -> tuple[Any, ...]:
    """A text route's prompts as llama-server splits them into tasks: a string or a list of
    token ids is one prompt; any other list is one prompt per element."""
    field = route.prompt_field
    if field not in body:
        raise BadRequest(f"The request has no '{field}'.")
    value = body[field]
    if route.text_prompt:
        if isinstance(value, list) and value and not all(_is_token(v) for v in value):
            return tuple(value)
        return (value,)
    if route.path == "/v1/responses":
        if not (isinstance(value, str) or (isinstance(value, list) and value)):
            raise BadRequest("The request needs 'input': a string or a non-empty list.")
    elif not isinstance(value, list) or not value:
        raise BadRequest(f"The request needs a non-empty '{field}' list.")
    return ()


EMPTY_WITH_N = (
    "An empty prompt cannot have 'n' above 1: the engine would never answer it. "
    "Send some text, or 'n': 1."
)
"""Why: llama-server (b11312) answers an empty prompt by releasing its slot at once, but
for ``n`` > 1 the other ``n − 1`` completions wait on slots of their own for that prompt to
be processed (``SLOT_STATE_WAIT_OTHER``), which never happens: the request never answers
and those slots stay busy ("processing", 0 prompt tokens) until the client leaves. Found by
the gate fuzz (issue 22). Whether ``""`` is empty to the engine depends on the model (one
that adds a BOS token gets one), so the gate refuses it for every model: a prompt with no
text asked for several completions has no use worth a hung slot."""


def _empty(prompt: Any) -> bool:
    """A text prompt with nothing in it: ``""``, no token ids, or llama-server's prompt
    object with an empty ``prompt_string`` and no media."""
    if isinstance(prompt, dict) and not prompt.get("multimodal_data"):
        prompt = prompt.get("prompt_string", "")
    return prompt == "" or prompt == []


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(_is_token(v) for v in value)


def conversation_key(route: Route, body: dict[str, Any]) -> str | None:
    """A short hash of what starts the conversation: the system prompt (``instructions``)
    and the first user message (for text prompts, their first characters)."""
    head: Any
    if route.text_prompt:
        prompt = body.get("prompt")
        head = prompt[:TEXT_PREFIX_CHARS] if isinstance(prompt, str) else None
    else:
        system = route.system_field
        head = [body[system]] if system is not None and system in body else []
        messages = body.get(route.prompt_field)
        if isinstance(messages, str):
            head.append(messages)
        for message in messages if isinstance(messages, list) else ():
            head.append(message)
            if isinstance(message, dict) and message.get("role") == "user":
                break
    if not head:
        return None
    digest = hashlib.sha256()
    _feed(digest, head)
    return digest.hexdigest()[:12]


def _feed(digest: Any, value: Any) -> None:
    """Hash a JSON value by its parts: strings as they are (an agent's system prompt is
    long, and serializing it again for every turn would cost more than the rest of the
    gate's work on the request), objects in key order, tags between parts."""
    if isinstance(value, str):
        digest.update(b"s")
        digest.update(value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=str):
            digest.update(b"k" + str(key).encode("utf-8", "surrogatepass") + b"\0")
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, list):
        digest.update(b"[")
        for item in value:
            _feed(digest, item)
            digest.update(b",")
        digest.update(b"]")
    else:
        digest.update(b"v" + repr(value).encode())
    digest.update(b"\0")


def completion_cap(asked: Asked, prompt_tokens: int, *, cap: int, ceiling: int) -> int:
    """The completion tokens charged and allowed: ``min(asked, cap, ceiling − prompt)``
    (at least 0; 0 means the prompt alone fills the ceiling)."""
    wanted = cap if asked.max_tokens is None else min(asked.max_tokens, cap)
    return max(0, min(wanted, ceiling - prompt_tokens))


def forwarded_body(
    asked: Asked, completion: int, id_slot: int | None, sampling: SamplingDefaults = ()
) -> bytes:
    """The body sent to the engine: the cap written into every length field the client used
    (the first of the route's fields when it used none), the pinned slot, and the gate's
    sampling defaults the client left out (:mod:`homelab.gate.sampling`).

    Fields the client did not send are appended to its own bytes (its JSON is not
    serialized again: for an agent's long history that is most of the gate's work); a
    field it sent that must change (a bound over the cap) makes the gate rewrite it."""
    body = asked.body
    used = [name for name in asked.route.cap_fields if body.get(name) is not None]
    changed: dict[str, int | float] = {}
    for name in used or asked.route.cap_fields[:1]:
        value = body.get(name)
        if not isinstance(value, int) or value < 0 or value > completion:
            changed[name] = completion
    if id_slot is not None and asked.id_slot is None:
        changed["id_slot"] = id_slot
    carried = asked.route.sampling_fields
    changed.update(missing(body, sampling, carried))
    raw = asked.raw.rstrip()
    if raw[:1] == b"{" and raw[-1:] == b"}" and not any(name in body for name in changed):
        extra = b"".join(
            b',"%s":%s' % (k.encode(), json.dumps(v).encode()) for k, v in changed.items()
        )
        return raw[:-1] + extra + b"}"
    return _BODY_JSON({**body, **changed}).encode()
