"""A streamed chat with the running model, through the URL homelab hands out (the gate).

The TUI's "try it" pane uses it so a person sees the model answer without leaving the app:
each question is sent with the conversation so far to ``POST /v1/chat/completions`` with
``stream: true``, and the answer comes back as llama-server's server-sent events
(``data: {"choices": [{"delta": {"content": …}}]}`` lines, the last one with
``finish_reason`` and ``usage``, then ``data: [DONE]``).

:meth:`ChatSession.ask` yields typed events (:class:`ChatDelta`, :class:`ChatDone`,
:class:`ChatFailed`) and never raises for what the server or the network does: a refused
port, an HTTP error from the gate (429/503 with their ``Retry-After``, 413 for a
conversation over the gate's ceiling, a refused key), an ``error`` object inside the
stream, a stream that ends before ``[DONE]`` (the answer was cut) each end the answer with
a :class:`ChatFailed` whose :class:`ChatError` says what happened in words. An empty or
absurdly long question is refused before anything is sent. Data lines that are not JSON
are skipped and counted (one bad line does not lose the rest of the answer).

Cancelling: the stream runs on asyncio, so cancelling the task that iterates closes the
connection at once (the gate, and llama-server behind it, stop generating for it).
Iterate under :func:`contextlib.aclosing` so the generator's cleanup runs when the
consumer stops early. Whatever text arrived is kept in the history, marked ``cut`` when the
answer did not end on its own, so the next question has the context the person saw.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from homelab.agents.chat_errors import (
    ChatError,
    cut,
    not_answering,
    refuse_prompt,
    status_error,
    stream_error,
)
from homelab.engine.loopback import loopback_async_client, require_loopback

ROUTE = "/v1/chat/completions"
READ_TIMEOUT_S = 600.0
"""The longest wait for the next bytes of an answer: a question may queue at the gate
behind real requests before its first token (the gate answers 503 when it gives up)."""


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """More of the answer's text, as it arrived."""

    text: str


@dataclass(frozen=True, slots=True)
class ChatDone:
    """The answer ended on its own (``[DONE]`` came)."""

    finish_reason: str | None
    """``stop``, ``length`` (the token cap cut it)…; None: the server did not say."""
    prompt_tokens: int | None
    """Tokens of the conversation as the server counted them; None: not reported."""
    completion_tokens: int | None
    """Tokens of the answer; None: not reported."""
    skipped_lines: int = 0
    """``data:`` lines that were not JSON (skipped)."""


@dataclass(frozen=True, slots=True)
class ChatFailed:
    """The answer did not come, or stopped before its end (text that came stays shown)."""

    error: ChatError


ChatEvent = ChatDelta | ChatDone | ChatFailed


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of the conversation."""

    role: str
    """``user`` or ``assistant``."""
    content: str
    cut: bool = False
    """An answer that stopped before its end (cancelled, cut, failed midway)."""


@dataclass(slots=True)
class _Reading:
    """What one answer's stream said so far."""

    text: list[str] = field(default_factory=list)
    done: bool = False
    failed: bool = False
    """An error ended it (already said)."""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    skipped: int = 0


class ChatSession:
    """One conversation with the model at ``base_url`` (the gate, or the engine without
    one); see the module docstring.

    Raises:
        NotLoopbackError: ``base_url`` is not on this machine's loopback.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.base_url = require_loopback(base_url.rstrip("/"))
        self.model = model
        self.api_key = api_key
        self.max_tokens = max_tokens
        """Sent as ``max_tokens`` when set (the gate caps it anyway); None: the gate's cap."""
        self.temperature = temperature
        self.read_timeout_s = read_timeout_s
        self._history: list[Turn] = []

    @property
    def history(self) -> tuple[Turn, ...]:
        """The turns so far (a question whose answer never started is not kept)."""
        return tuple(self._history)

    def body(self, prompt: str) -> dict[str, Any]:
        """The request for ``prompt`` after the history."""
        messages = [{"role": t.role, "content": t.content} for t in self._history]
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [*messages, {"role": "user", "content": prompt}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    async def ask(self, prompt: str) -> AsyncGenerator[ChatEvent, None]:
        """Send ``prompt`` with the history; the answer's events as they arrive, ending with
        one :class:`ChatDone` or :class:`ChatFailed` (or with the cancel of the caller)."""
        refused = refuse_prompt(prompt)
        if refused is not None:
            yield ChatFailed(refused)
            return
        reading = _Reading()
        try:
            async for event in self._stream(prompt, reading):
                yield event
        finally:  # also on a cancel: what the person saw is what the model said
            text = "".join(reading.text)
            if reading.done or text:
                self._history.append(Turn("user", prompt))
                self._history.append(Turn("assistant", text, cut=not reading.done))

    async def _stream(self, prompt: str, reading: _Reading) -> AsyncIterator[ChatEvent]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        client = loopback_async_client(
            self.base_url, timeout_s=self.read_timeout_s, headers=headers
        )
        async with client:
            try:
                async with client.stream("POST", ROUTE, json=self.body(prompt)) as response:
                    if response.status_code != 200:
                        await response.aread()
                        yield ChatFailed(status_error(response, self.base_url))
                        return
                    kind = response.headers.get("content-type", "")
                    if not kind.startswith("text/event-stream"):
                        await response.aread()
                        shown = " ".join(response.text.split())[:120]
                        yield ChatFailed(
                            ChatError(
                                f"{self.base_url} answered without a stream ({kind or 'no type'}):"
                                f" {shown!r}",
                                hint="is this port homelab's engine? the server panel shows it",
                                title="Not a stream",
                            )
                        )
                        return
                    async for event in _events(response.aiter_lines(), reading):
                        yield event
            except httpx.ConnectError as error:
                yield ChatFailed(not_answering(self.base_url, error))
                return
            except httpx.TimeoutException:
                yield ChatFailed(
                    ChatError(
                        f"no answer from {self.base_url} for {self.read_timeout_s:g} s",
                        hint="the engine may be stuck: `homelab status` shows it",
                        title="No answer",
                    )
                )
                return
            except httpx.RequestError as error:  # the connection broke midway
                yield ChatFailed(
                    cut(
                        len("".join(reading.text)), f"the connection broke ({type(error).__name__})"
                    )
                )
                return
        if not reading.done and not reading.failed:
            yield ChatFailed(cut(len("".join(reading.text)), "the stream ended before [DONE]"))


async def _events(lines: AsyncIterator[str], reading: _Reading) -> AsyncIterator[ChatEvent]:
    """The events of one SSE answer (see the module docstring), ``reading`` kept up to date."""
    async for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, ``:`` comments, ``event:``/``id:`` fields
        payload = line[5:].strip()
        if payload == "[DONE]":
            reading.done = True
            yield ChatDone(
                reading.finish_reason,
                reading.prompt_tokens,
                reading.completion_tokens,
                reading.skipped,
            )
            return
        try:
            data = json.loads(payload)
        except ValueError:
            reading.skipped += 1
            continue
        if not isinstance(data, dict):
            reading.skipped += 1
            continue
        if "error" in data and "choices" not in data:
            reading.failed = True
            yield ChatFailed(stream_error(data["error"], len("".join(reading.text))))
            return
        text = _take(data, reading)
        if text:
            reading.text.append(text)
            yield ChatDelta(text)


def _take(data: dict[str, Any], reading: _Reading) -> str:
    """The text of one chunk; its finish reason and usage go into ``reading``."""
    usage = data.get("usage")
    if isinstance(usage, dict):
        reading.prompt_tokens = _count(usage.get("prompt_tokens"), reading.prompt_tokens)
        reading.completion_tokens = _count(
            usage.get("completion_tokens"), reading.completion_tokens
        )
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    if isinstance(choice.get("finish_reason"), str):
        reading.finish_reason = choice["finish_reason"]
    delta = choice.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


def _count(value: object, known: int | None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return known


def open_chat(
    base_url: str,
    api_key: str | None = None,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
) -> ChatSession:
    """A conversation with the model ``base_url`` serves (its id asked as the agent contract
    check asks it: :func:`~homelab.agents.engine_target.served_model`).

    Raises:
        EngineNotAnsweringError: it does not name its model.
        NotLoopbackError: ``base_url`` is not on this machine's loopback.
    """
    from homelab.agents.engine_target import served_model

    model = served_model(base_url, api_key)
    return ChatSession(base_url, model, api_key, max_tokens=max_tokens, temperature=temperature)
