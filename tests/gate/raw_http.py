"""A raw HTTP/1.1 exchange on a socket, for the fuzz and the soak: header values sent as the
bytes given (non-ASCII, non-UTF-8 included: ``httpx`` would refuse or re-encode them), any
body bytes, ``Connection: close``, and every read bounded by a deadline so a hung answer
fails the test instead of hanging it."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field
from typing import Any


class NoAnswer(AssertionError):
    """The gate did not answer in time, or closed without a whole answer."""


@dataclass(slots=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    """The body, de-chunked."""
    events: list[bytes] = field(default_factory=list)
    """The ``data:`` payloads of an SSE body."""

    @property
    def sse(self) -> bool:
        return self.headers.get("content-type", "").startswith("text/event-stream")

    def json(self) -> Any:
        return json.loads(self.body)


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def exchange(
    url: str,
    path: str,
    body: bytes,
    headers: list[tuple[bytes, bytes]] = (),  # type: ignore[assignment]
    *,
    host: bytes | None = None,
    timeout_s: float = 120.0,
) -> Answer:
    """POST ``body`` to ``path`` with ``headers`` (raw bytes) and read the whole answer.

    Raises:
        NoAnswer: nothing whole came back within ``timeout_s``.
    """
    where = address(url)
    host = host if host is not None else f"{where[0]}:{where[1]}".encode()
    head = b"POST %s HTTP/1.1\r\nHost: %s\r\n" % (path.encode(), host)
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    head += b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    return parse_answer(send_raw(url, head + body, timeout_s=timeout_s))


def send_raw(url: str, request: bytes, *, timeout_s: float = 120.0) -> bytes:
    """Send ``request`` (the whole HTTP request, as bytes) and read until the gate closes.

    Raises:
        NoAnswer: the gate did not close within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    data = b""
    with socket.create_connection(address(url), timeout=timeout_s) as s:
        try:
            s.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gate may answer and close before it read a refused body: read it
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoAnswer(f"no whole answer within {timeout_s:g} s: {data[:200]!r}")
            s.settimeout(left)
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
    return data


def parse_answer(data: bytes) -> Answer:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep or not head.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")):
        raise NoAnswer(f"not an HTTP answer: {data[:200]!r}")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        rest = _dechunk(rest)
    elif "content-length" in headers:
        if len(rest) < int(headers["content-length"]):
            raise NoAnswer(f"a body cut short: {len(rest)} of {headers['content-length']}")
    answer = Answer(status, headers, rest)
    if answer.sse:
        answer.events = [
            line[5:].strip()
            for line in rest.replace(b"\r\n", b"\n").split(b"\n")
            if line.startswith(b"data:")
        ]
    return answer


def _dechunk(data: bytes) -> bytes:
    out = b""
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        if not sep:
            raise NoAnswer("a chunked body cut short (no last chunk)")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return out
        out += data[:size]
        data = data[size + 2 :]
