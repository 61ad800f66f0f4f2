"""The HTTP plumbing of the Hub stand-in: listeners, the request record, writing answers.

:mod:`tests.hubstub.server` decides *what* to answer; this module writes it (status,
headers, JSON bodies, the Hub's ``X-Error-*`` headers, byte ranges) and keeps the
listening sockets so the stand-in can shut down without leaving connections behind.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .repo import StubFile

CHUNK = 64 * 1024
PACED_WRITES_PER_S = 20
"""A throttled body goes out in chunks of about 1/20 s of its rate (at least 1 KiB)."""
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class RecordedRequest:
    """One request the stand-in answered.

    Attributes:
        method: ``GET``, ``HEAD`` or ``POST``.
        host: ``"hub"`` or ``"cdn"``.
        path: the URL path, percent-decoded, without the query.
        range: the ``Range`` header as sent, or None.
        status: the status code answered.
        bytes_sent: body bytes actually written (fewer than announced after a cut).
        authorization: the ``Authorization`` header as sent, or None.
        repo: the repository the request was about, when there is one.
        filename: the repository file the request was about, when there is one.
    """

    method: str
    host: str
    path: str
    range: str | None
    status: int
    bytes_sent: int
    authorization: str | None
    repo: str | None
    filename: str | None


class Reply(Exception):
    """An error answer, raised from deep in a route and written by the dispatcher."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        commit: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.commit = status, message, code, commit
        self.headers = headers or {}


class StubServer(ThreadingHTTPServer):
    """One listener on 127.0.0.1 (a free port); ``host`` is ``"hub"`` or ``"cdn"``.

    It remembers its open client sockets so ``drop_all`` can end keep-alive connections
    (huggingface_hub keeps a pooled client) when the stand-in stops.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, dispatch: Callable[[StubHandler, str], None], host: str) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.dispatch, self.host = dispatch, host
        self.open_sockets: set[socket.socket] = set()
        self.lock = threading.Lock()

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        with self.lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):  # type: ignore[no-untyped-def]
        with self.lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):  # type: ignore[no-untyped-def]
        """A client that hangs up (a test that stops reading) is normal here, not a traceback."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def drop_all(self) -> None:
        with self.lock:
            sockets = list(self.open_sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class StubHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive (every answer has a Content-Length); quiet; hands each request on."""

    protocol_version = "HTTP/1.1"
    server_version = "HubStub/1"
    timeout = 30
    server: StubServer

    def do_GET(self) -> None:
        self.server.dispatch(self, "GET")

    def do_HEAD(self) -> None:
        self.server.dispatch(self, "HEAD")

    def do_POST(self) -> None:
        self.server.dispatch(self, "POST")

    def log_message(self, format: str, *args: object) -> None:
        return


def send_head(handler: StubHandler, status: int, headers: dict[str, str]) -> None:
    """Status line and headers."""
    handler.send_response(status)
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()


def send_json(handler: StubHandler, method: str, body: object) -> tuple[int, int]:
    """A 200 JSON answer; returns (status, body bytes sent)."""
    data = json.dumps(body).encode()
    send_head(
        handler,
        200,
        {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(data))},
    )
    if method == "HEAD":
        return 200, 0
    handler.wfile.write(data)
    return 200, len(data)


def send_cut_json(handler: StubHandler, body: object) -> tuple[int, int]:
    """A 200 JSON answer cut off halfway: the full Content-Length, half the body, then the
    connection dropped (the client reads a body shorter than announced)."""
    data = json.dumps(body).encode()
    send_head(
        handler,
        200,
        {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(data))},
    )
    handler.wfile.write(data[: len(data) // 2])
    handler.wfile.flush()
    handler.close_connection = True
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    return 200, len(data) // 2


def send_error(handler: StubHandler, method: str, reply: Reply) -> int:
    """An error answer with the Hub's ``X-Error-Code`` / ``X-Error-Message``; returns the status."""
    data = json.dumps({"error": reply.message}).encode()
    headers = {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(data))}
    if reply.code:
        headers["X-Error-Code"] = reply.code
    headers["X-Error-Message"] = reply.message
    if reply.commit:
        headers["X-Repo-Commit"] = reply.commit
    headers.update(reply.headers)
    try:
        send_head(handler, reply.status, headers)
        if method != "HEAD":
            handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return reply.status


def byte_range(header: str | None, size: int) -> tuple[int, int, int, dict[str, str]]:
    """``(status, start, end)`` for a ``Range`` header (end exclusive) and the headers to add.

    Raises:
        Reply: 416 when the range starts at or past the end.
    """
    match = _RANGE.match(header.strip()) if header else None
    if not match or not (match.group(1) or match.group(2)):
        return 200, 0, size, {}
    first, last = match.group(1), match.group(2)
    if first:
        start = int(first)
        end = min(int(last) + 1, size) if last else size
    else:
        start, end = max(size - int(last), 0), size
    if start >= size or start >= end:
        raise Reply(
            416, "Requested Range Not Satisfiable", headers={"Content-Range": f"bytes */{size}"}
        )
    return 206, start, end, {"Content-Range": f"bytes {start}-{end - 1}/{size}"}


def write_body(
    handler: StubHandler,
    stub_file: StubFile,
    start: int,
    end: int,
    *,
    cut: int | None,
    flip: bool,
    after: tuple[int, Callable[[], None]] | None = None,
    rate: Callable[[], int | None] = lambda: None,
) -> int:
    """Send bytes ``[start, end)`` (one byte flipped if ``flip``); after ``cut`` bytes drop the
    connection instead; ``after = (n, action)`` calls ``action()`` once ``n`` bytes are sent;
    ``rate()``, asked before each chunk, caps the pace in bytes per second (None: no cap).
    Returns the body bytes written."""
    limit = end - start if cut is None else min(cut, end - start)
    sent = 0
    position = start
    while sent < limit:
        if after is not None and sent >= after[0]:
            handler.wfile.flush()
            after[1]()
            after = None
        stop = start + limit if after is None else min(start + limit, start + after[0])
        bps = rate()
        size = CHUNK if bps is None else max(1024, min(CHUNK, bps // PACED_WRITES_PER_S))
        chunk = stub_file.read(position, min(position + size, stop))
        if flip and position <= stub_file.size // 2 < position + len(chunk):
            i = stub_file.size // 2 - position
            chunk = chunk[:i] + bytes([chunk[i] ^ 0xFF]) + chunk[i + 1 :]
        handler.wfile.write(chunk)
        sent += len(chunk)
        position += len(chunk)
        if bps is not None:
            handler.wfile.flush()  # on the wire now, then wait out this chunk's share of time
            time.sleep(len(chunk) / bps)
    handler.wfile.flush()
    if limit < end - start:
        handler.close_connection = True
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    return sent
