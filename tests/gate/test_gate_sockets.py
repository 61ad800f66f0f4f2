"""The gate's client connections bounded, with real sockets on 127.0.0.1: an idle socket
and a client sending its headers a byte at a time are closed once ``idle_timeout_s``
passed; over ``max_connections`` a new connection is answered 503 and closed; the soft
open-file limit is raised to the hard one. Every loop here is bounded in count and time.

Found by an adversarial pass (issue 22): idle sockets were never closed (1,100 of them
starved every keyed client), and a 1-byte-a-second header sender was never cut.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys

import pytest

from tests.gate.conftest import client, wait_for

pytestmark = pytest.mark.engine

GOOD = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2}
BOUND_S = 30.0
"""How long a test waits for the gate to close a socket before it fails (not a timing)."""


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=BOUND_S)


def closed_by_peer(s: socket.socket, wait_s: float) -> bool:
    """Whether the gate closed ``s`` (EOF or reset) within ``wait_s``."""
    readable, _, _ = select.select([s], [], [], wait_s)
    if not readable:
        return False
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def test_an_idle_socket_is_closed(engine, gate) -> None:
    g = gate(engine, idle_timeout_s=1.0)
    with connect(g.url) as s:
        assert closed_by_peer(s, BOUND_S)
    with client(g.url) as c:
        assert c.post("/v1/chat/completions", json=GOOD).status_code == 200


def test_a_slow_header_sender_is_cut(engine, gate) -> None:
    g = gate(engine, idle_timeout_s=1.0)
    header = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
    cut = False
    with connect(g.url) as s:
        for byte in header:  # at most 250 bytes, 0.2 s apart: bounded
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            if closed_by_peer(s, 0.2):
                cut = True
                break
    assert cut, "the gate kept reading a header sent a byte at a time"
    assert g.state().admitted == 0


def test_a_connection_over_the_cap_is_answered_503_and_closed(engine, gate) -> None:
    g = gate(engine, max_connections=3)
    held = [connect(g.url) for _ in range(3)]
    answer = b""
    try:
        for _ in range(50):  # the gate takes connections on its own loop: try, bounded
            extra = connect(g.url)
            readable, _, _ = select.select([extra], [], [], 0.2)
            if readable:
                answer = extra.recv(65536)
                extra.close()
                break
            held.append(extra)  # taken before the first three: one of the held
    finally:
        for s in held:
            s.close()
    assert answer.startswith(b"HTTP/1.1 503")
    assert b"too_many_connections" in answer
    assert len(held) < 50

    def served() -> bool:
        with client(g.url) as c:
            try:
                return c.post("/v1/chat/completions", json=GOOD).status_code == 200
            except Exception:
                return False

    wait_for(served, timeout_s=BOUND_S, what="the gate serving again once below the cap")
    assert g.state().charged_tokens == 0


def test_the_soft_open_file_limit_is_raised_to_the_hard_one() -> None:
    code = (
        "import resource\n"
        "from homelab.gate.sockets import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "now = raise_open_file_limit()\n"
        "print(now, hard, resource.RLIM_INFINITY)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    now, hard, infinity = (int(v) for v in done.stdout.split())
    assert now == (65536 if hard == infinity else hard) and now > 256


def test_the_connection_cap_stays_below_the_open_file_limit() -> None:
    import resource

    from homelab.gate.sockets import RESERVED_FDS, connection_cap

    cap = connection_cap(None)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert cap <= soft - RESERVED_FDS or soft == resource.RLIM_INFINITY
    assert connection_cap(10) == 10
