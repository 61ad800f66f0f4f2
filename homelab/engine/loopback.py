"""The one HTTP client homelab uses to talk to its own engines, on this machine only.

Health checks, ``/slots``, ``/metrics`` and ``/props`` go to an engine homelab bound on
the loopback interface, so:

* proxies from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``.netrc``)
  are ignored (``trust_env=False``): a user with a proxy set would otherwise send their
  loopback status calls to the proxy, which cannot reach this machine's 127.0.0.1;
* timeouts are short: the engine is local, a slow answer means it is busy;
* only ``127.0.0.1``, ``::1`` and ``localhost`` are spoken to: any other host, in the
  base URL or in a request, is refused with :class:`NotLoopbackError` (a state file or a
  user setting that names another host must not turn a status call into a request
  elsewhere).
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from homelab.errors import EngineError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0


class NotLoopbackError(EngineError):
    """A URL for an engine status call names a host that is not this machine's loopback."""

    title = "Not a local engine"


def is_loopback_url(url: str | httpx.URL) -> bool:
    """True when ``url`` is http(s) on 127.0.0.1, ::1 or localhost."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return False
    return parsed.scheme in ("http", "https") and parsed.host.lower() in LOOPBACK_HOSTS


def require_loopback(url: str | httpx.URL) -> str:
    """``url`` as text, once it is known to be a loopback URL.

    Raises:
        NotLoopbackError: it is not.
    """
    if not is_loopback_url(url):
        raise NotLoopbackError(
            f"homelab talks to its engines on this machine only, not at {str(url)[:200]!r}.",
            hint="The engine's address must be 127.0.0.1, ::1 or localhost.",
        )
    return str(url)


def _check_request(request: httpx.Request) -> None:
    require_loopback(request.url)


def loopback_client(
    base_url: str | None = None,
    *,
    timeout_s: float = TIMEOUT_S,
    headers: Mapping[str, str] | None = None,
) -> httpx.Client:
    """An httpx client for loopback engines: no proxies from the environment, short timeouts,
    every request's host checked (see the module docstring). Close it when done.

    Args:
        base_url: the engine (``http://127.0.0.1:8080``); None: requests give whole URLs.
        timeout_s: bounds each read/write (connecting gets at most ``CONNECT_TIMEOUT_S``).
        headers: sent with every request (e.g. an API key).

    Raises:
        NotLoopbackError: ``base_url`` is not a loopback URL (requests elsewhere raise it too).
    """
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
    return httpx.Client(
        base_url="" if base_url is None else require_loopback(base_url.rstrip("/")),
        timeout=timeout,
        trust_env=False,
        headers=headers,
        event_hooks={"request": [_check_request]},
    )


async def _check_request_async(request: httpx.Request) -> None:
    require_loopback(request.url)


def loopback_async_client(
    base_url: str,
    *,
    timeout_s: float = TIMEOUT_S,
    headers: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """:func:`loopback_client`'s asyncio twin, for a stream a person may cancel at any
    moment (cancelling the task closes the connection at once, where a thread blocked in a
    read would wait for the next byte). Same rules: no proxies, every host checked.

    Raises:
        NotLoopbackError: ``base_url`` is not a loopback URL (requests elsewhere raise it too).
    """
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, CONNECT_TIMEOUT_S))
    return httpx.AsyncClient(
        base_url=require_loopback(base_url.rstrip("/")),
        timeout=timeout,
        trust_env=False,
        headers=headers,
        event_hooks={"request": [_check_request_async]},
    )
