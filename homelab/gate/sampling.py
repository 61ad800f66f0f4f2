"""Sampling defaults the gate writes into a request that leaves them out.

Why: coding agents built for hosted models send no sampling of their own (Claude Code
2.1 sends no ``temperature``, ``top_p`` or ``seed``), so llama-server samples them at its
own defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, a random seed) unless the
GGUF carries ``general.sampling.*``. A person who wants the model card's settings (Qwen3's
0.6 / 20 / 0.95 / 0) or reproducible answers sets them once, in ``gate.toml``::

    [sampling]
    temperature = 0.6
    top_k = 20
    top_p = 0.95
    min_p = 0.0
    seed = 42

A value the client sent is never changed; only the missing ones are added. llama-server
reads all of these on its OpenAI, Responses and native routes; its Anthropic route
(``/v1/messages``) passes on only ``temperature``, ``top_p`` and ``top_k``, so the gate
writes only those there (:data:`~homelab.gate.requests.ANTHROPIC_SAMPLING`) and says at
start which settings Anthropic clients will not get (:func:`unreachable`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

SamplingDefaults = tuple[tuple[str, int | float], ...]
"""``(name, value)`` pairs, in the order given (frozen: part of the gate's settings)."""

SEED_MAX = (1 << 32) - 1
"""llama.cpp's seed is a ``uint32_t`` (``LLAMA_DEFAULT_SEED`` = 0xFFFFFFFF: random)."""


def _number_in(low: float, high: float) -> Callable[[object], bool]:
    def ok(value: object) -> bool:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and low <= value <= high
        )

    return ok


def _whole_in(low: int, high: int) -> Callable[[object], bool]:
    def ok(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    return ok


_RULES: dict[str, tuple[Callable[[object], bool], str]] = {
    "temperature": (_number_in(0, 100), "a number from 0 (greedy) to 100"),
    "top_p": (_number_in(0, 1), "a number from 0 to 1"),
    "min_p": (_number_in(0, 1), "a number from 0 to 1"),
    "top_k": (_whole_in(0, 1 << 31), "a whole number ≥ 0 (0: no top-k)"),
    "seed": (_whole_in(0, SEED_MAX - 1), f"a whole number from 0 to {SEED_MAX - 1:,}"),
}
"""The settings ``[sampling]`` may hold, and what each must be."""
KNOWN = tuple(_RULES)


def sampling_problem(table: object) -> str | None:
    """What is wrong with a ``[sampling]`` table (None: nothing)."""
    if not isinstance(table, Mapping):
        return f"[sampling] must be a table of settings ({', '.join(KNOWN)}), not {table!r}"
    for name, value in table.items():
        rule = _RULES.get(name)
        if rule is None:
            return f"[sampling] sets {name}, which the gate does not know (it knows {', '.join(KNOWN)})"
        ok, wanted = rule
        if not ok(value):
            return f"[sampling] {name} must be {wanted}, not {value!r}"
    return None


def as_defaults(table: Mapping[str, int | float]) -> SamplingDefaults:
    """A checked ``[sampling]`` table as the settings' frozen pairs."""
    return tuple((name, table[name]) for name in table)


def missing(
    body: Mapping[str, object], defaults: SamplingDefaults, carried: tuple[str, ...] | None = None
) -> dict[str, int | float]:
    """The defaults the client's body does not set (a field sent as null counts as unset:
    llama-server reads it as absent), of those the route carries to the engine (``carried``;
    None: all)."""
    return {
        name: value
        for name, value in defaults
        if body.get(name) is None and (carried is None or name in carried)
    }


def unreachable(defaults: SamplingDefaults, anthropic_fields: tuple[str, ...]) -> str | None:
    """What to say when settings are given that the Anthropic route cannot carry (None:
    nothing to say)."""
    lost = [name for name, _ in defaults if name not in anthropic_fields]
    if not lost:
        return None
    return (
        f"[sampling] {', '.join(lost)} reach(es) the engine on the OpenAI, Responses and "
        f"native routes only: llama-server's Anthropic route (/v1/messages, Claude Code's) "
        f"passes on just {', '.join(anthropic_fields)}"
    )
