"""llama-server's JSON answers, parsed: ``/slots`` entries and ``/props``.

Pure functions, no I/O (the HTTP client is :mod:`homelab.engine.llamacpp.client`). Field
names are llama-server's (b11312): a slot lists ``id``, ``n_ctx``,
``is_processing`` and, once a task has used it, ``id_task``, ``n_prompt_tokens``
(tokens held in its KV cache, generated ones included: ``prompt.tokens.size()``),
``n_prompt_tokens_processed``, ``n_prompt_tokens_cache`` and
``next_token[0].n_decoded``/``n_remain``.
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
    return SlotStatus(
        id=int(item["id"]),
        n_ctx=int(item["n_ctx"]),
        is_processing=bool(item["is_processing"]),
        id_task=_int_or_none(item.get("id_task")),
        n_prompt_tokens=_int_or_none(item.get("n_prompt_tokens")),
    )


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
