"""``host:port`` endpoints of llama.cpp RPC workers, as the RPC setting lists them.

Pure checks, shared by the plan options (the RPC setting), the front-ends and the worker
query. llama.cpp splits an endpoint at its *first* colon (``parse_endpoint`` in
ggml-rpc.cpp), so a bare IPv6 literal cannot be one: a host name or an IPv4 address it is.
The same endpoint twice would give llama-server the same worker's memory twice; refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from homelab.errors import UsageError

SETTING = "the RPC workers setting"
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``(host, port)`` of a checked ``host:port``."""
    host, _, port = endpoint.partition(":")
    return host, int(port)


def parse_endpoint(text: str) -> str:
    """One ``host:port``, checked and written plainly (``host`` as given, the port in digits).

    Raises:
        UsageError: no port, a port outside 1-65535, an empty or odd host (an IPv6 literal).
    """
    shown = text if len(text) <= 60 else f"{text[:57]}..."
    value = text.strip()
    host, colon, port = value.partition(":")
    if not colon or not port:
        raise UsageError(
            f"RPC worker {shown!r} has no port: write it as HOST:PORT (e.g. 192.168.1.20:50052)",
            hint=f"fix {SETTING}",
        )
    if ":" in port or not host or not set(host) <= _HOST_CHARS:
        why = "a host name or IPv4 address"
        if ":" in port or host.startswith("["):
            why += " (llama.cpp's RPC cannot take an IPv6 literal)"
        raise UsageError(f"RPC worker {shown!r}: the host must be {why}", hint=f"fix {SETTING}")
    if not (port.isascii() and port.isdigit()) or len(port) > 10 or not 1 <= int(port) <= 65535:
        raise UsageError(
            f"RPC worker {shown!r}: the port must be a number from 1 to 65535",
            hint=f"fix {SETTING}",
        )
    return f"{host}:{int(port)}"


def parse_endpoints(given: str | Iterable[str]) -> tuple[str, ...]:
    """Endpoints from ``"a:1,b:2"`` or an iterable of such texts, in order, each checked.

    Raises:
        UsageError: one is malformed (see :func:`parse_endpoint`), a list item is empty, or
            the same endpoint comes twice.
    """
    texts = [given] if isinstance(given, str) else list(given)
    out: list[str] = []
    for text in texts:
        for item in text.split(","):
            if not item.strip():
                raise UsageError(
                    f"an empty entry in the RPC workers list {text!r}", hint=f"fix {SETTING}"
                )
            endpoint = parse_endpoint(item)
            if endpoint in out:
                raise UsageError(
                    f"RPC worker {endpoint} is listed twice (its memory would count twice)",
                    hint=f"fix {SETTING}",
                )
            out.append(endpoint)
    return tuple(out)
