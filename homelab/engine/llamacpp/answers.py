"""llama-server's JSON answers, parsed: ``/slots`` entries, ``/props``, completion timings.

Pure functions, no I/O (the HTTP client is :mod:`homelab.engine.llamacpp.client`). Field
names are llama-server's (b11312): a slot lists ``id``, ``n_ctx``,
``is_processing`` and, once a task has used it, ``id_task``, ``n_prompt_tokens``
(tokens held in its KV cache, generated ones included: ``prompt.tokens.size()``),
``n_prompt_tokens_processed``, ``n_prompt_tokens_cache`` and
``next_token[0].n_decoded``/``n_remain``. A completion's ``timings`` carry
``cache_n`` (prompt tokens reused from the cache) and ``prompt_n`` (prompt tokens
processed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class SlotStatus:
    """One entry of ``/slots``; the task fields are None until a task has used the slot."""

    id: int
    n_ctx: int
    is_processing: bool
    id_task: int | None = None
    n_prompt_tokens: int | None = None
    """Tokens held in the slot's KV cache (prompt and generated)."""
    n_prompt_tokens_processed: int | None = None
    n_prompt_tokens_cache: int | None = None
    """Prompt tokens the running task reused from the cache."""
    n_decoded: int | None = None
    n_remain: int | None = None

    @property
    def tokens(self) -> int:
        """Tokens held (0 for a slot no task has used)."""
        return self.n_prompt_tokens or 0


@dataclass(frozen=True, slots=True)
class ServerProps:
    """The parts of ``/props`` homelab reads; ``raw`` has the rest."""

    total_slots: int | None
    n_ctx_per_slot: int | None
    model_path: str | None
    build_info: str | None
    is_sleeping: bool | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def parse_slot(item: Any) -> SlotStatus:
    """One ``/slots`` entry.

    Raises:
        ValueError: the entry lacks ``id``/``n_ctx``/``is_processing``.
    """
    if not isinstance(item, dict) or not {"id", "n_ctx", "is_processing"} <= item.keys():
        raise ValueError(f"not a llama-server slot: {str(item)[:120]}")
    next_token = item.get("next_token")
    nt = (
        next_token[0]
        if isinstance(next_token, list) and next_token and isinstance(next_token[0], dict)
        else {}
    )
    return SlotStatus(
        id=int(item["id"]),
        n_ctx=int(item["n_ctx"]),
        is_processing=bool(item["is_processing"]),
        id_task=_int_or_none(item.get("id_task")),
        n_prompt_tokens=_int_or_none(item.get("n_prompt_tokens")),
        n_prompt_tokens_processed=_int_or_none(item.get("n_prompt_tokens_processed")),
        n_prompt_tokens_cache=_int_or_none(item.get("n_prompt_tokens_cache")),
        n_decoded=_int_or_none(nt.get("n_decoded")),
        n_remain=_int_or_none(nt.get("n_remain")),
    )


def cache_reuse(response_json: Any) -> tuple[int, int] | None:
    """``(cache_n, prompt_n)`` of a completion response: prompt tokens reused from the
    cache and prompt tokens processed. From ``timings`` (``/completion``, the OpenAI
    endpoints, the last stream chunk); else from OpenAI ``usage``
    (``prompt_tokens_details.cached_tokens``); None when the response has neither."""
    if not isinstance(response_json, dict):
        return None
    timings = response_json.get("timings")
    if isinstance(timings, dict):
        cache_n, prompt_n = (
            _int_or_none(timings.get("cache_n")),
            _int_or_none(timings.get("prompt_n")),
        )
        if cache_n is not None and prompt_n is not None:
            return cache_n, prompt_n
    usage = response_json.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens_details"), dict):
        cached = _int_or_none(usage["prompt_tokens_details"].get("cached_tokens"))
        total = _int_or_none(usage.get("prompt_tokens"))
        if cached is not None and total is not None and total >= cached:
            return cached, total - cached
    return None


def parse_props(data: Any) -> ServerProps:
    """``GET /props``.

    Raises:
        TypeError: the answer is not a JSON object.
    """
    if not isinstance(data, dict):
        raise TypeError(f"expected an object, got {type(data).__name__}")
    settings = data.get("default_generation_settings")
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    sleeping = data.get("is_sleeping")
    model_path = data.get("model_path")
    build_info = data.get("build_info")
    return ServerProps(
        total_slots=_int_or_none(data.get("total_slots")),
        n_ctx_per_slot=_int_or_none(n_ctx),
        model_path=model_path if isinstance(model_path, str) else None,
        build_info=build_info if isinstance(build_info, str) else None,
        is_sleeping=sleeping if isinstance(sleeping, bool) else None,
        raw=data,
    )
