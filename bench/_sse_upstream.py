"""A llama-server-shaped upstream for the gate benchmarks: instant answers, stamped events.

Not a benchmark itself, and not a stand-in for the engine in any test: it exists so a
bench can see what a proxy (or the gate) costs without the engine's own jitter, which on
a small shared CPU is tens of milliseconds. A bare asyncio HTTP/1.1 server (no framework,
so it favours no stack), run in its own process::

    python bench/_sse_upstream.py PORT

Routes (POST bodies are JSON):

- ``/v1/chat/completions``: ``stream: true`` → ``n`` (default ``max_tokens``) SSE events
  ``interval_ms`` apart, each a chat chunk with one content token and ``"t"``: the
  ``time.monotonic_ns()`` taken just before it is written, then a last chunk with
  ``usage`` and ``timings`` and ``[DONE]``; otherwise one small chat completion JSON with
  ``"t"``. ``pad`` adds that many bytes to each event.
- ``/v1/chat/completions/input_tokens`` → ``{"input_tokens": 12}``; ``/tokenize`` → 12 tokens.
- ``GET /health``, ``/props``, ``/slots``: minimal llama-server-shaped JSON (1 idle slot).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

LOOPBACK = "127.0.0.1"
PROMPT_TOKENS = 12


def _json_reply(payload: object) -> bytes:
    body = json.dumps(payload).encode()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    return head % len(body) + body


def _timings(n: int) -> dict[str, object]:
    return {"cache_n": PROMPT_TOKENS - 1, "prompt_n": 1, "predicted_n": n}


def _usage(n: int) -> dict[str, int]:
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": n,
        "total_tokens": PROMPT_TOKENS + n,
    }


async def _stream(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    n = int(body.get("n") or body.get("max_tokens") or 16)
    interval = float(body.get("interval_ms") or 0) / 1e3
    pad = "x" * int(body.get("pad") or 0)
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    for _ in range(n):
        if interval:
            await asyncio.sleep(interval)
        event = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}],"t":%d,"pad":"%s"}\n\n'
        event %= (time.monotonic_ns(), pad.encode())
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
    last = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": _usage(n),
        "timings": _timings(n),
    }
    tail = b"data: %s\n\ndata: [DONE]\n\n" % json.dumps(last).encode()
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(tail), tail))
    await writer.drain()


def _answer(method: bytes, path: str, body: dict[str, Any]) -> bytes:
    if path == "/v1/chat/completions/input_tokens":
        return _json_reply({"input_tokens": PROMPT_TOKENS})
    if path == "/tokenize":
        return _json_reply({"tokens": list(range(PROMPT_TOKENS))})
    if path == "/v1/chat/completions":
        return _json_reply(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                "usage": _usage(1),
                "timings": _timings(1),
                "t": time.monotonic_ns(),
            }
        )
    if path == "/slots":
        return _json_reply([{"id": 0, "n_ctx": 2048, "is_processing": False}])
    if path == "/props":
        return _json_reply({"total_slots": 1, "default_generation_settings": {"n_ctx": 2048}})
    return _json_reply({"status": "ok", "method": method.decode()})


async def _connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                request_line = await reader.readuntil(b"\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            method, target = request_line.split()[:2]
            length = 0
            while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            raw = await reader.readexactly(length) if length else b""
            body = json.loads(raw) if raw else {}
            path = target.decode().split("?")[0]
            if path == "/v1/chat/completions" and body.get("stream"):
                await _stream(writer, body)
            else:
                writer.write(_answer(method, path, body))
                await writer.drain()
    except ConnectionError:
        return
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(_connection, LOOPBACK, port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
