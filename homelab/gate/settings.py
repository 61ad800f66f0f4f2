"""The gate's settings: one frozen dataclass, checked before the gate starts."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass
from urllib.parse import urlsplit

from homelab.errors import UsageError
from homelab.gate.sampling import SamplingDefaults

DEFAULT_MAX_QUEUE = 64
"""Requests that may wait at once before the gate answers 429 (Unsloth Studio: 16 × slots,
at least 64)."""


def is_loopback_host(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def origin_problem(origin: str) -> str | None:
    """Why ``origin`` cannot be an allowed origin (``scheme://host[:port]``); None: fine."""
    if not origin.isascii() or not origin.isprintable() or " " in origin:
        return "it must be printable ASCII without spaces"
    try:
        parts = urlsplit(origin)
    except ValueError as error:
        return str(error)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return "it must start with http:// or https:// and name a host"
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        return "an origin is scheme://host[:port], no path, query or user"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class GateSettings:
    """How the gate admits requests. None: taken from the engine when the gate starts."""

    host: str = "127.0.0.1"
    port: int
    """0: any free port (the runner reports the one it got)."""
    max_concurrent: int | None = None
    """Requests running in the engine at once; None: the engine's slots."""
    token_budget: int | None = None
    """Tokens admitted at once; None: KV cells allocated × 0.85 for a unified pool, each
    slot's context for split slots."""
    queue_timeout_s: float = 300.0
    """How long a request may wait for admission before it is answered 503."""
    max_queue: int = DEFAULT_MAX_QUEUE
    """Requests that may wait at once; one more is answered 429."""
    max_tokens_cap: int = 8192
    """The most completion tokens one request is charged (and allowed to generate)."""
    max_prompts: int | None = None
    """The most engine tasks one request may become (the prompts of a list × ``n``), refused
    with 413 before any is counted; None: the most that run at once (``max_concurrent``,
    the engine's slots), so no request of ours makes llama-server defer its own tasks."""
    api_key: str | None = None
    """Required on every route when set (``Authorization: Bearer`` or ``x-api-key``)."""
    sampling: SamplingDefaults = ()
    """Sampling written into a request that leaves it out (``[sampling]`` in gate.toml)."""
    affinity: bool = True
    """Keep each conversation on the engine slot that holds its prompt cache."""
    allowed_origins: tuple[str, ...] = ()
    """Web pages (``scheme://host[:port]``) allowed to call the gate from a browser (CORS);
    any other ``Origin`` is refused (:mod:`homelab.gate.trust`). Empty: none."""
    idle_timeout_s: float = 30.0
    """How long a client connection may go without sending a whole request (idle between
    requests, or sending its headers slowly) before the gate closes it."""
    max_connections: int | None = None
    """Client connections held at once; one more is answered 503 and closed. None: the
    open-file limit (raised to the hard one at start) less a reserve
    (:mod:`homelab.gate.sockets`)."""
    keepalive_s: float = 5.0
    """A queued streaming request gets an SSE comment this often while it waits."""
    slot_idle_wait_s: float = 30.0
    """After a client left mid-request, how long to wait for the engine's slot to go idle
    before its charge is freed anyway."""
    engine_wait_s: float = 180.0
    """How long an admitted request waits for an engine that is restarting under the gate
    (a new plan, a heal, a crash) before it is answered 502."""

    def check(self) -> None:
        """Raise UsageError naming the first setting that cannot work."""
        if not 0 <= self.port <= 65535:
            raise _bad("port", self.port, "a TCP port, 1-65535 (0: any free port)")
        for name in ("max_concurrent", "token_budget", "max_prompts", "max_connections"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise _bad(name, value, "a whole number of at least 1, or unset (from the engine)")
        for name in (
            "queue_timeout_s",
            "keepalive_s",
            "slot_idle_wait_s",
            "engine_wait_s",
            "idle_timeout_s",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise _bad(name, value, "a number of seconds above 0")
        if self.max_queue < 0:
            raise _bad("max_queue", self.max_queue, "0 or more (0: never wait)")
        if self.max_tokens_cap < 1:
            raise _bad("max_tokens_cap", self.max_tokens_cap, "at least 1 token")
        for origin in self.allowed_origins:
            problem = origin_problem(origin)
            if problem is not None:
                raise _bad("allowed_origins", origin, f"an origin ({problem})")
        if self.api_key is not None and not self.api_key.strip():
            raise _bad("api_key", "(empty)", "a non-empty key, or unset on loopback")
        if not is_loopback_host(self.host) and self.api_key is None:
            raise UsageError(
                f"The gate would listen on {self.host}, reachable from other machines, "
                "without an API key.",
                hint="Set the gate's api_key, or keep the gate's host at 127.0.0.1.",
                title="Gate needs an API key",
            )


def _bad(name: str, value: object, wanted: str) -> UsageError:
    return UsageError(
        f"The gate setting {name} is {value!r}; it must be {wanted}.",
        hint=f"Change the gate's {name} setting.",
        title="Bad gate setting",
    )
