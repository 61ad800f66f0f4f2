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
"""

from __future__ import annotations

import json
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
        BadRequest: not JSON, nested deeper than :data:`MAX_JSON_DEPTH`, or holding a lone
            surrogate.
    """
    try:
        value = json.loads(raw)
    except RecursionError:
        raise _too_deep() from None
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
