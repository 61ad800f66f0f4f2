"""The plan's facts about a running engine: what it was started to hold, kept in its record.

Written when the engine starts (from the plan, never re-parsed from its command line)
and compared when the next ``serve`` asks for the same model: a running engine is only
adopted when it runs as the person asked (:func:`differences`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class PlanFacts:
    """What the plan gave the engine (engine-neutral words)."""

    slots: int
    """Conversations served at once (``-np`` / ``--max-num-seqs``)."""
    ctx_total: int
    """Total context (``-c`` / ``--max-model-len``)."""
    ctx_per_slot: int
    """Tokens one conversation may hold."""
    kv_tokens: int
    """Cells of KV cache allocated (llama.cpp ``n_ctx``; vLLM's predicted cache size)."""
    unified: bool
    """One KV pool shared by all slots (llama.cpp ``-kvu``; vLLM always pools)."""
    cache_type_k: str
    cache_type_v: str

    def describe(self) -> str:
        """``context 8192 × 2 slots, cache q8_0/q8_0``."""
        unified = ", unified KV" if self.unified else ""
        slots = "slot" if self.slots == 1 else "slots"
        return (
            f"context {self.ctx_total} × {self.slots} {slots}, "
            f"cache {self.cache_type_k}/{self.cache_type_v}{unified}"
        )

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> PlanFacts:
        """Parse facts; TypeError when a field is missing or of the wrong type."""
        if not isinstance(data, dict):
            raise TypeError("plan facts must be an object")
        values: dict[str, object] = {}
        for name, kind in _TYPES.items():
            value = data.get(name)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise TypeError(f"plan fact {name} must be {kind.__name__}, not {value!r}")
            values[name] = value
        return cls(**values)  # type: ignore[arg-type]


_TYPES: dict[str, type] = {
    "slots": int,
    "ctx_total": int,
    "ctx_per_slot": int,
    "kv_tokens": int,
    "unified": bool,
    "cache_type_k": str,
    "cache_type_v": str,
}


@dataclass(frozen=True, slots=True)
class Asked:
    """What a person explicitly asked of the next start; None: not asked (the plan decides)."""

    ctx: int | None = None
    slots: int | None = None
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    unified: bool | None = None
    port: int | None = None
    """A pinned port."""
    engine: str | None = None
    """The engine kind."""


def differences(
    facts: PlanFacts | None, port: int, asked: Asked, engine: str | None = None
) -> list[tuple[str, object, object]]:
    """(setting, running value, asked value) for each explicitly asked setting that differs.

    An engine recorded without facts (an older record) differs in every asked plan
    setting: nothing says it runs that way.
    """
    out: list[tuple[str, object, object]] = []
    if asked.engine is not None and engine is not None and asked.engine != engine:
        out.append(("engine", engine, asked.engine))
    if asked.port is not None and asked.port != port:
        out.append(("port", port, asked.port))
    pairs = (
        ("ctx", None if facts is None else facts.ctx_total, asked.ctx),
        ("slots", None if facts is None else facts.slots, asked.slots),
        ("cache_type_k", None if facts is None else facts.cache_type_k, asked.cache_type_k),
        ("cache_type_v", None if facts is None else facts.cache_type_v, asked.cache_type_v),
        ("unified", None if facts is None else facts.unified, asked.unified),
    )
    for name, running, wanted in pairs:
        if wanted is None or running == wanted:
            continue
        if name == "ctx" and facts is not None and _padded(facts, wanted):
            continue
        out.append((name, running, wanted))
    return out


CTX_PAD = 256
"""llama.cpp pads the context per slot up to a multiple of 256 cells."""


def _padded(facts: PlanFacts, asked: object) -> bool:
    """True when the running total context is ``asked`` rounded up the way llama.cpp pads it."""
    return isinstance(asked, int) and asked <= facts.ctx_total < asked + CTX_PAD * facts.slots
