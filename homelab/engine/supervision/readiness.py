"""When an engine is ready, and what the supervisor needs to know about an engine.

**Ready = the health endpoint answers OK *and* the engine's log says it is
serving.** Either alone misleads: llama-server answers ``/health`` (503) long
before the model is loaded, and a log line is only a claim until a request is
answered (an applied argument is not a started server). The supervisor watches
for the serving line as the log streams in, then polls health quickly (from
20 ms, doubling to 500 ms) until it answers 200.

:class:`EngineProfile` is everything engine-specific the (engine-agnostic)
supervisor uses: health path, serving line, how to explain a failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from homelab.engine.supervision.failure import EngineFailure

if TYPE_CHECKING:
    import httpx

    from homelab.engine.supervision.states import Inbox

HEALTH_TIMEOUT_S = 2.0
FIRST_POLL_S = 0.02
MAX_POLL_S = 0.5


@dataclass(frozen=True)
class EngineProfile:
    """What the supervisor needs to know about one engine."""

    name: str
    """The program, as messages name it ("llama-server", "vllm")."""
    serving_line: re.Pattern[str]
    """A log line that says the engine is serving (llama-server: ``listening on http://…``)."""
    diagnose: Callable[[Sequence[str], int | None], EngineFailure]
    """(the log lines of one run, its exit code or None) -> why it stopped."""
    health_path: str = "/health"
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Extra environment variables for the engine process."""
    key_env: str | None = None
    """The environment variable the engine reads its API key from (``LLAMA_API_KEY``,
    ``VLLM_API_KEY``): how the spec's key reaches it without showing on its command line.
    None: the engine takes no key (the RPC worker)."""
    kind: str = ""
    """The engine kind's name, as records and options say it ("llama.cpp"); default: ``name``."""
    probe: Callable[[str], HealthAnswer] | None = None
    """For an engine that speaks no HTTP (the RPC worker): ``probe(url)`` alone says it is
    ready, polled from the start (no serving line, no health path). None: the rule above."""

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", self.name)

    def is_serving(self, line: str) -> bool:
        """True for the log line that says the engine serves."""
        return self.serving_line.search(line) is not None


@dataclass(frozen=True, slots=True)
class HealthAnswer:
    """One health request's outcome."""

    ok: bool
    status_code: int | None
    """None when nothing answered (refused, timed out)."""
    detail: str


def health_client(api_key: str | None = None) -> httpx.Client:
    """The loopback client (:mod:`homelab.engine.loopback`) with the health checks' timeout,
    sending the engine's own key when it has one (llama-server leaves ``/health`` open, but
    another health path or engine may not)."""
    from homelab.engine.engine_key import key_headers
    from homelab.engine.loopback import loopback_client

    return loopback_client(timeout_s=HEALTH_TIMEOUT_S, headers=key_headers(api_key))


def check_health(client: httpx.Client, base_url: str, path: str = "/health") -> HealthAnswer:
    """Ask ``base_url + path`` once; OK means HTTP 200.

    Raises:
        NotLoopbackError: ``base_url`` is not on this machine's loopback.
    """
    import httpx

    from homelab.engine.loopback import require_loopback

    require_loopback(base_url)

    try:
        response = client.get(base_url.rstrip("/") + path)
    except httpx.TimeoutException:
        return HealthAnswer(False, None, "health check timed out")
    except httpx.HTTPError as error:
        return HealthAnswer(False, None, f"no answer ({type(error).__name__})")
    body = response.text[:200]
    return HealthAnswer(response.status_code == 200, response.status_code, body)


def await_ready(
    inbox: Inbox,
    pid: int,
    *,
    serving: Callable[[], bool],
    url: Callable[[], str | None],
    health_path: str,
    client: httpx.Client,
    deadline: float,
    probe: Callable[[str], HealthAnswer] | None = None,
) -> str:
    """Wait until the engine is ready: its serving line seen, then health polled until OK.

    Returns:
        "ready", "timeout" (``deadline``, monotonic, passed), or what the inbox
        had first: "exited", "stop", "release", "restart".
    """
    poll_s = FIRST_POLL_S  # once the serving line was seen: 20 ms doubling to 500 ms
    while True:
        pending = inbox.pending(pid)
        if pending is not None:
            return pending
        wait_s = 1.0  # the serving line wakes the inbox; this is only a safety net
        if probe is not None or serving():
            base = url()
            if (
                base is not None
                and (
                    probe(base) if probe is not None else check_health(client, base, health_path)
                ).ok
            ):
                return "ready"
            wait_s, poll_s = poll_s, min(poll_s * 2, MAX_POLL_S)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout"
        inbox.wait(min(wait_s, remaining))
