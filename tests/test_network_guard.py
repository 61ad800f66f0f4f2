"""The suite's own guard: tests cannot open connections beyond loopback."""

from __future__ import annotations

import socket

import pytest


def test_non_loopback_connections_are_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(ConnectionRefusedError, match="loopback"):
            sock.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed


def test_loopback_connections_work() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
