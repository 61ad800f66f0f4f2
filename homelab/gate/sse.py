"""The accounting fields of an engine answer: prompt tokens reused and processed, tokens
generated, and an error, from a JSON body or read off an SSE stream as it passes.

The stream itself is forwarded untouched; :class:`StreamTally` looks at a copy, line by
line, and parses only the ``data:`` lines that can carry these fields (``timings``,
``usage``, ``error``), so the cost per chunk stays a byte search.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MARKERS = (b'"timings"', b'"usage"', b'"error"')
LAST_EVENTS = (b"response.completed", b"response.incomplete", b"response.failed", b"message_stop")
"""The event that ends a Responses or an Anthropic stream (a chat stream ends ``data: [DONE]``)."""
WHOLE_PARSE_BYTES = 4096
"""A whole answer longer than this has only its accounting objects parsed."""
_DECODER = json.JSONDecoder()
MAX_LINE = 1 << 20
"""A line longer than this is not kept for parsing (nothing of ours is that long)."""


@dataclass(slots=True)
class Outcome:
    """What the engine reported; None: not reported."""

    cached: int | None = None
    processed: int | None = None
    completion: int | None = None
    error: str | None = None

    @property
    def prompt(self) -> int | None:
        if self.processed is None:
            return None
        return self.processed + (self.cached or 0)

    def update(self, other: Outcome) -> None:
        """Take the fields ``other`` knows."""
        for name in ("cached", "processed", "completion", "error"):
            value = getattr(other, name)
            if value is not None:
                setattr(self, name, value)

    def take(self, data: Any) -> None:
        """Fold one JSON object (a whole answer or one stream event) in."""
        if not isinstance(data, dict):
            return
        if "error" in data and "choices" not in data:
            error = data["error"]
            self.error = str(error.get("message", error) if isinstance(error, dict) else error)
        for name in ("message", "response"):  # Anthropic message_start, Responses events
            inner = data.get(name)
            if isinstance(inner, dict) and isinstance(inner.get("usage"), dict):
                self.take({"usage": inner["usage"]})
        timings = data.get("timings")
        if isinstance(timings, dict):
            self.cached = _int(timings.get("cache_n"), self.cached)
            self.processed = _int(timings.get("prompt_n"), self.processed)
            self.completion = _int(timings.get("predicted_n"), self.completion)
            return
        usage = data.get("usage")
        if not isinstance(usage, dict):
            return
        details = usage.get("input_tokens_details")
        if isinstance(details, dict):  # OpenAI Responses: input_tokens counts the cached ones
            total = _int(usage.get("input_tokens"), None)
            if total is not None:
                self.cached = _int(details.get("cached_tokens"), 0)
                self.processed = total - (self.cached or 0)
            self.completion = _int(usage.get("output_tokens"), self.completion)
            return
        if "input_tokens" in usage or "output_tokens" in usage:  # Anthropic
            self.processed = _int(usage.get("input_tokens"), self.processed)
            self.cached = _int(usage.get("cache_read_input_tokens"), self.cached)
            self.completion = _int(usage.get("output_tokens"), self.completion)
            return
        details = usage.get("prompt_tokens_details")
        prompt = _int(usage.get("prompt_tokens"), None)
        cached = _int(details.get("cached_tokens"), None) if isinstance(details, dict) else None
        if prompt is not None:
            self.cached = cached or 0
            self.processed = prompt - self.cached
        self.completion = _int(usage.get("completion_tokens"), self.completion)


def _int(value: Any, default: int | None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return default


def outcome_of(body: bytes) -> Outcome:
    """The accounting of a whole (non-streamed) JSON answer. A long one (a long completion)
    is not parsed whole: only its ``timings`` and ``usage`` objects, found by their keys
    (a key in a JSON string has its quotes escaped, so only a real key matches)."""
    outcome = Outcome()
    try:
        if len(body) <= WHOLE_PARSE_BYTES or b'"error"' in body:
            outcome.take(json.loads(body))
            return outcome
        text = body.decode()
        parts = {}
        for key in ("timings", "usage"):
            at = text.rfind(f'"{key}":')
            if at >= 0:
                start = at + len(key) + 3
                while text[start : start + 1].isspace():
                    start += 1
                parts[key] = _DECODER.raw_decode(text, start)[0]
        outcome.take(parts)
    except (ValueError, UnicodeDecodeError):
        pass
    return outcome


class StreamTally:
    """Feed it the stream's chunks in order; :attr:`outcome` fills in as events pass."""

    def __init__(self) -> None:
        self.outcome = Outcome()
        self.errors = 0
        self.ended = False
        """The stream's last event has passed (the answer is whole)."""
        self._rest = b""

    def feed(self, chunk: bytes) -> None:
        data = self._rest + chunk if self._rest else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self._rest = data if len(data) <= MAX_LINE else b""
            return
        self._rest = data[end + 1 :] if len(data) - end <= MAX_LINE else b""
        complete = data[:end]
        if not self.ended and (b"[DONE]" in complete or any(e in complete for e in LAST_EVENTS)):
            self.ended = any(_is_last(line) for line in complete.split(b"\n"))
        if not any(marker in complete for marker in MARKERS):
            return
        for line in complete.split(b"\n"):
            if line.startswith(b"data:") and any(m in line for m in MARKERS):
                try:
                    event = json.loads(line[5:])
                except (ValueError, UnicodeDecodeError):
                    continue
                had = self.outcome.error
                self.outcome.take(event)
                if self.outcome.error is not None and self.outcome.error is not had:
                    self.errors += 1


def _is_last(line: bytes) -> bool:
    """Whether an SSE line is a stream's last event: ``data: [DONE]``, an ``event:`` line
    naming one of :data:`LAST_EVENTS`, or a ``data:`` object of that ``type`` (the words of
    an answer are inside a JSON string, so they never match: their quotes are escaped)."""
    field, _, value = line.partition(b":")
    value = value.strip()
    if field == b"event":
        return value in LAST_EVENTS
    if field != b"data":
        return False
    if value == b"[DONE]":
        return True
    if not any(e in value for e in LAST_EVENTS):
        return False
    try:
        event = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(event, dict) and str(event.get("type", "")).encode() in LAST_EVENTS
