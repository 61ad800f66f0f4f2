"""A scripted OpenAI-style chat server on 127.0.0.1, speaking llama-server's SSE shape.

Real HTTP over a real socket (asyncio streams in a thread of its own, so a test's event
loop, a Pilot's or none can talk to it): each ``POST /v1/chat/completions`` is answered by
the next queued :class:`Reply`, written byte for byte as the test asked (a stream that
ends without ``[DONE]``, a line that is not JSON, an ``error`` event, an error status with
``Retry-After``, an answer that never ends until the client goes). ``GET /v1/models``
names :data:`MODEL`. Each request's JSON body and headers are kept in ``requests``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

MODEL = "stub-model"


def chunk(content: str | None = None, finish: str | None = None, **extra: object) -> str:
    """One ``data:`` line as llama-server writes a chat completion chunk."""
    delta = {} if content is None else {"content": content}
    body = {
        "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
        "created": 1,
        "id": "chatcmpl-stub",
        "model": MODEL,
        "object": "chat.completion.chunk",
        **extra,
    }
    return f"data: {json.dumps(body)}\n\n"


def answer(*words: str, usage: tuple[int, int] | None = (12, 3), done: bool = True) -> list[str]:
    """The lines of a whole streamed answer: a role chunk, one chunk per word, the finish
    chunk with ``usage`` (prompt, completion tokens), then ``[DONE]`` unless ``done`` is False."""
    lines = [f"data: {json.dumps({'choices': [{'delta': {'role': 'assistant'}}]})}\n\n"]
    lines += [chunk(word) for word in words]
    extra = {}
    if usage is not None:
        extra["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        }
    lines.append(chunk(None, "stop", **extra))
    if done:
        lines.append("data: [DONE]\n\n")
    return lines


@dataclass
class Reply:
    """How to answer one chat request."""

    lines: list[str] = field(default_factory=list)
    """Written in order, each flushed on its own (after ``pause_s``)."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    """A whole body instead of the lines (an error status's JSON)."""
    endless: bool = False
    """After the lines, one more word every ``pause_s`` until the client goes."""
    pause_s: float = 0.0
    gate: threading.Event | None = None
    """Wait for it (set by the test) before the lines."""
    promised_bytes: int | None = None
    """A ``Content-Length`` the lines fall short of: the connection drops mid-body."""


class ChatServer:
    """See the module docstring; :meth:`start` it, :meth:`stop` it."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[tuple[dict, dict[str, str]]] = []
        self.client_gone = threading.Event()
        """An endless answer saw its client close the connection."""
        self.words_sent = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reply(self, reply: Reply) -> None:
        self.replies.append(reply)

    def start(self) -> ChatServer:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = future.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (h.partition(":") for h in header_lines if h)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "GET" and path == "/v1/models":
                data = json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
                await _whole(writer, 200, {"Content-Type": "application/json"}, data)
            elif method == "POST" and path == "/v1/chat/completions":
                self.requests.append((json.loads(body), headers))
                reply = self.replies.popleft() if self.replies else Reply(answer("hi"))
                await self._answer(reader, writer, reply)
            else:
                await _whole(writer, 404, {}, b"not found")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: Reply
    ) -> None:
        if reply.body is not None or reply.status != 200:
            headers = {"Content-Type": "application/json", **reply.headers}
            await _whole(writer, reply.status, headers, reply.body or b"")
            return
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
        if reply.promised_bytes is not None:
            head += f"Content-Length: {reply.promised_bytes}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        writer.write((head + "\r\n").encode())  # no length: the body ends with the connection
        await writer.drain()
        if reply.gate is not None:
            await asyncio.to_thread(reply.gate.wait, 30)
        if reply.endless and not reply.pause_s:
            reply.pause_s = 0.02  # a word at a time, as an engine writes them
        for line in _lines(reply):
            if reply.pause_s:
                await asyncio.sleep(reply.pause_s)
            writer.write(line.encode())
            try:
                await writer.drain()
            except ConnectionError:
                self.client_gone.set()
                return
            if reply.endless:
                self.words_sent += 1
                if reader.at_eof():  # the client closed its end
                    self.client_gone.set()
                    return


def _lines(reply: Reply) -> Iterator[str]:
    yield from reply.lines
    while reply.endless:
        yield chunk("and ")


async def _whole(writer: asyncio.StreamWriter, status: int, headers: dict, body: bytes) -> None:
    head = f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write((head + "\r\n").encode() + body)
    await writer.drain()


def running_chat_server() -> Iterator[ChatServer]:
    """A started :class:`ChatServer`, stopped after (the body of the ``chat_server`` fixtures)."""
    server = ChatServer().start()
    try:
        yield server
    finally:
        server.stop()
