"""A client's JSON body read safely: bounded nesting, valid Unicode only.

Why: the gate parses every completion body itself (to charge it) and may write it again
(to cap it), so a body that breaks Python's own JSON handling must be refused as a 400
before admission, never become a 500 with a traceback. Two such bodies were found:

- nesting 100,000 levels deep: ``json.loads`` raises ``RecursionError`` (and a body that
  parses just under Python's limit would break the gate's later walks over it); the gate
  refuses anything deeper than :data:`MAX_JSON_DEPTH` levels, far more than any real
  chat, tool schema or message list needs;
- a lone UTF-16 surrogate escape (``"\\ud800"``): valid JSON text, but not a character, so
  the body cannot be written back as UTF-8 when the gate rewrites it.

And two the gate read but llama-server cannot (its nlohmann parser answered 500 with a
``server_error``, found by the gate fuzz, ``tests/gate/test_gate_fuzz.py``): ``NaN`` and
``Infinity`` (not JSON, though Python reads them) and a number beyond a double's range
(``1e400``, or an integer of 309 digits and more). The gate refuses them as a 400 naming
the number, before admission.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from homelab.gate.errors import BadRequest

MAX_JSON_DEPTH = 128
"""The deepest nesting of objects and arrays the gate accepts in a request body."""
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
"""A high surrogate escape not followed by a low one, or a low one not after a high one
(a cheap first look: an escaped backslash before ``u`` can match, so a match is checked)."""


def load_body(raw: bytes) -> Any:
    """The JSON value of ``raw``.

    Raises:
        BadRequest: not JSON (``NaN`` and ``Infinity`` included), a number beyond a
            double's range, nested deeper than :data:`MAX_JSON_DEPTH`, or holding a lone
            surrogate.
    """
    try:
        value = json.loads(
            raw, parse_constant=_not_a_number, parse_float=_finite_float, parse_int=_int
        )
    except RecursionError:
        raise _too_deep() from None
    except _NumberOutOfRange as error:
        raise BadRequest(
            f"The request body holds a number the engine cannot read: {error}."
        ) from None
    except (ValueError, UnicodeDecodeError) as error:
        raise BadRequest(f"The request body is not valid JSON: {error}") from None
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise _too_deep()
    if _LONE_SURROGATE.search(raw) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise BadRequest(
                "The request body holds a lone UTF-16 surrogate escape (such as \\ud800) "
                "in a string: that is not a character. Send valid Unicode text."
            ) from None
    return value


def engine_bytes(raw: bytes, value: Any) -> bytes:
    """``raw`` as llama-server reads it: UTF-8 without a byte-order mark. Python's json
    reads UTF-16, UTF-32 and a UTF-8 BOM (so the gate accepted them) but the engine answers
    them 500 (found by the gate fuzz); ``value`` (``raw`` parsed) is written again then."""
    if json.detect_encoding(raw) == "utf-8":
        return raw
    return json.dumps(value, ensure_ascii=False).encode()


class _NumberOutOfRange(ValueError):
    """Raised inside ``json.loads`` for a number the engine cannot read."""


def _not_a_number(literal: str) -> float:
    raise _NumberOutOfRange(f"{literal} is not a JSON number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _NumberOutOfRange(f"the number {literal[:40]} is beyond a double's range")
    return value


def _int(literal: str) -> int:
    """An integer; one of more digits than a double's range holds (309) is refused: the
    engine reads integers past 64 bits as doubles. (A Python call per integer: a chat has
    a few; a prompt of 100k token ids parses in 23 ms instead of 13.)"""
    if len(literal.lstrip("-")) > DOUBLE_DIGITS:
        raise _NumberOutOfRange(
            f"the number {literal[:20]}… ({len(literal)} digits) is beyond a double's range"
        )
    return int(literal)


DOUBLE_DIGITS = 308
"""The most digits of an integer the gate accepts: a double reaches 1.8e308."""


def _too_deep() -> BadRequest:
    return BadRequest(
        f"The request body nests objects and arrays more than {MAX_JSON_DEPTH} levels "
        f"deep; the gate accepts at most {MAX_JSON_DEPTH}."
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` levels (a loop, not recursion)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False
