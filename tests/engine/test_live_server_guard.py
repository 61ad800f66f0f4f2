"""The tests' own engine start (``tests/engine/live_server.py``) never takes another
program's answer for its engine's: a port taken between ``free_port()`` and llama-server's
bind fails the test that started it, saying so, instead of letting it signal an engine that
already exited and read the other program's health (a flake seen with runs side by side)."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest

from tests.engine.live_server import start_server, stop_server, wait_ready
from tests.factory.server_log import free_port


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


def test_an_answer_from_another_program_on_the_port_is_not_the_engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path: Path
) -> None:
    port = free_port()
    other = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    log = tmp_path / "llama-server.log"
    proc = start_server(llama_server_bin, smollm2_gguf, port, ["-c", "512"], log)
    try:
        with pytest.raises(pytest.fail.Exception, match="not from this llama-server"):
            wait_ready(f"http://127.0.0.1:{port}", proc, log)
    finally:
        stop_server(proc)
        other.shutdown()
