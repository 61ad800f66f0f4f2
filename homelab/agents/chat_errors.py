"""What a chat with the running model that did not answer means, in words for a person.

:mod:`homelab.agents.chat_stream` ends an answer that did not come (or stopped midway) with
one of these errors: the title says what happened in a few words ("Gate busy", "Answer
cut"), the message carries the values (the HTTP status, the server's own words, the
``Retry-After`` seconds, how much of the answer arrived), the hint the next step.
"""

from __future__ import annotations

import json

import httpx

from homelab.errors import EngineError

MAX_PROMPT_CHARS = 100_000
"""A question longer than this is refused before it is sent: it is a paste gone wrong, not
a question (the gate would refuse it anyway with 413 once over its ceiling)."""


class ChatError(EngineError):
    """Why an answer did not come (or stopped): the title in a few words, the message with
    the values involved."""

    title = "Chat failed"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        title: str | None = None,
        status: int | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message, hint=hint, title=title)
        self.status = status
        """The HTTP status that refused the question; None: no status (network, stream)."""
        self.retry_after_s = retry_after_s
        """The server's ``Retry-After`` in seconds; None: it did not say."""


def refuse_prompt(prompt: str) -> ChatError | None:
    """Why ``prompt`` is not sent at all; None: it is sent."""
    if not prompt.strip():
        return ChatError("the question is empty", title="Nothing to send")
    if len(prompt) > MAX_PROMPT_CHARS:
        return ChatError(
            f"the question has {len(prompt):,} characters; at most {MAX_PROMPT_CHARS:,} are sent",
            hint="ask something shorter",
            title="Question too long",
        )
    return None


def message_of(error: object) -> str:
    """The words of an OpenAI-shaped ``error`` (an object with ``message``, or text), short."""
    message = error.get("message") if isinstance(error, dict) else error
    text = message if isinstance(message, str) and message.strip() else json.dumps(error)
    return " ".join(text.split())[:300]


def stream_error(error: object, got_chars: int) -> ChatError:
    """An ``error`` object inside the stream, after ``got_chars`` of the answer."""
    after = f" after {got_chars:,} characters" if got_chars else ""
    return ChatError(
        f"the server stopped the answer{after}: {message_of(error)}",
        hint="the engine's log (l) may say more",
        title="Error in the answer",
    )


def cut(got_chars: int, how: str) -> ChatError:
    """The answer stopped before its end (``how``), after ``got_chars``."""
    got = got_chars
    return ChatError(
        f"the answer was cut: {how}, after {got:,} characters",
        hint="the engine may have stopped or restarted: the server panel says",
        title="Answer cut",
    )


def not_answering(base_url: str, error: Exception) -> ChatError:
    return ChatError(
        f"nothing answers at {base_url} ({type(error).__name__}: {error})",
        hint="the engine (or its gate) is gone: the server panel says why",
        title="Engine not answering",
    )


def retry_after(response: httpx.Response) -> int | None:
    """``Retry-After`` in whole seconds; None: absent, or a date (not worth parsing here)."""
    value = response.headers.get("Retry-After", "").strip()
    return int(value) if value.isdigit() else None


def status_error(response: httpx.Response, base_url: str) -> ChatError:
    """What an error status from the gate (or the engine) means, in words."""
    status = response.status_code
    try:
        said = message_of(response.json().get("error"))
    except (ValueError, AttributeError):
        said = " ".join(response.text.split())[:300]
    wait = retry_after(response)
    again = f"; try again in {wait} s" if wait is not None else ""
    if status == 413:
        return ChatError(
            f"the gate refused the conversation as too large (HTTP 413): {said}",
            hint="the whole conversation is sent with each question: escape closes the "
            "pane, t opens a new conversation",
            title="Question too large",
            status=status,
        )
    if status == 429:
        return ChatError(
            f"the gate's queue is full (HTTP 429): {said}{again}",
            title="Gate busy",
            status=status,
            retry_after_s=wait,
        )
    if status == 503:
        return ChatError(
            f"the server cannot answer now (HTTP 503): {said}{again}",
            title="Engine busy",
            status=status,
            retry_after_s=wait,
        )
    if status in (401, 403):
        from homelab.gate.key_file import key_path

        return ChatError(
            f"{base_url} refused homelab's key (HTTP {status}): {said}",
            hint=f"the gate's key is read from {key_path()}",
            title="Key refused",
            status=status,
        )
    return ChatError(
        f"{base_url} answered HTTP {status}: {said}{again}",
        title="Question refused" if status < 500 else "Server error",
        status=status,
        retry_after_s=wait,
    )
