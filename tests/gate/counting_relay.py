"""A loopback HTTP relay in front of the real llama-server that counts the requests it
passes on, by path.

Why: the gate must refuse a request with too many prompts before it asks the engine
anything, and count a list's prompts in one ``/tokenize`` call; what reaches the engine is
only seen in front of it. Answers are passed on whole (no streaming: the tests that use it
ask for none).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


@contextmanager
def counting_relay(engine_url: str) -> Iterator[tuple[str, Counter[str]]]:
    """(``http://127.0.0.1:PORT`` relaying to ``engine_url``, the count of each path)."""
    seen: Counter[str] = Counter()
    upstream = httpx.Client(base_url=engine_url, trust_env=False, timeout=180.0)

    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            seen[self.path.split("?")[0]] += 1
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            kind = self.headers.get("Content-Type", "application/json")
            answer = upstream.request(
                self.command, self.path, content=body, headers={"Content-Type": kind}
            )
            self.send_response(answer.status_code)
            self.send_header("Content-Type", answer.headers.get("content-type", "text/plain"))
            self.send_header("Content-Length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        do_GET = do_POST = _relay

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        upstream.close()
        thread.join(10)
