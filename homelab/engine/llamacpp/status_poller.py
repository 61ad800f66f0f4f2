"""The engine status poller: one llama-server's health, slots and metrics, about once a second.

:class:`StatusPoller` asks the server (through
:class:`~homelab.engine.llamacpp.client.LlamaServerClient`, so over the loopback client)
every ``interval_s`` seconds and publishes each answer as a frozen
:class:`~homelab.engine.llamacpp.client.LiveStatus` event: health; ``/slots`` (KV cells
held per slot, ``kv_per_slot``); ``/metrics`` with the prompt and generation rates from
the counters' deltas since the previous poll (``window``, ``window_s``, ``prompt_tps``,
``gen_tps``), requests processing and deferred; and prompt-cache reuse of the latest
completions that saw a prompt (``cache_reuse``: their ``cache_n``/``prompt_n`` as the
counters sum them). Subscribers get events on their own threads (:mod:`homelab.events`).

The server's address may move (a restart on another port): give a function that returns
the URL to ask now, or None to skip a round (the engine is not ready).
"""

from __future__ import annotations

from collections.abc import Callable

from homelab.engine.llamacpp.client import LiveStatus, LlamaServerClient
from homelab.engine.loopback import require_loopback
from homelab.events import EventHub, Subscription
from homelab.polling import PollThread, every

INTERVAL_S = 1.0
TIMEOUT_S = 5.0


class StatusPoller:
    """Polls one llama-server until stopped (see the module docstring).

    Args:
        url: the server (``http://127.0.0.1:8080``), or a function giving it each round
            (None: skip this round).
        kv_unified: the server shares one KV pool among its slots (``-kvu``), so the KV
            capacity is one slot's context, not their sum.
        interval_s: seconds between polls.
        timeout_s: bounds each request (default the smaller of ``interval_s`` and 5 s).
        api_key: the engine's own key (an engine behind homelab's gate answers ``/slots``
            and ``/metrics`` with 401 without it); None: it has none.

    Raises:
        NotLoopbackError: ``url`` is a fixed URL that is not on this machine's loopback.
    """

    def __init__(
        self,
        url: str | Callable[[], str | None],
        *,
        kv_unified: bool | None = None,
        interval_s: float = INTERVAL_S,
        timeout_s: float | None = None,
        api_key: str | None = None,
    ) -> None:
        self._api_key = api_key
        if isinstance(url, str):
            fixed = require_loopback(url)
            self._url: Callable[[], str | None] = lambda: fixed
        else:
            self._url = url
        self.kv_unified = kv_unified
        self.interval_s = interval_s
        self.timeout_s = min(interval_s, TIMEOUT_S) if timeout_s is None else timeout_s
        self._hub: EventHub[LiveStatus] = EventHub("engine-status")
        self._client: LlamaServerClient | None = None
        self._thread = PollThread("homelab-engine-status", self._tick, every(interval_s))
        self.polls = 0
        """Rounds that asked the server (skipped rounds not counted)."""

    def subscribe(
        self, callback: Callable[[LiveStatus], None], *, queue_size: int | None = None
    ) -> Subscription[LiveStatus]:
        """Deliver every later status to ``callback`` on its own thread; call the result to stop."""
        return self._hub.subscribe(callback, queue_size=queue_size)

    @property
    def latest(self) -> LiveStatus | None:
        """The newest status (None before the first poll)."""
        return self._hub.last

    def wait(
        self, until: Callable[[LiveStatus], bool], timeout_s: float | None = None
    ) -> LiveStatus | None:
        """Block until the newest status satisfies ``until``; None on timeout."""
        return self._hub.wait_for(until, timeout_s)

    def start(self) -> StatusPoller:
        """Poll once now (on the caller's thread), then every ``interval_s`` on a thread."""
        self._tick(0)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling, join the thread, close the HTTP client, let subscribers finish."""
        self._thread.stop()
        if self._client is not None:
            self._client.close()
            self._client = None
        self._hub.close(timeout_s=1.0)

    def __enter__(self) -> StatusPoller:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tick(self, k: int) -> bool:
        url = self._url()
        client = self._client
        if client is not None and client.base_url != (url or "").rstrip("/"):
            client.close()  # moved or gone: the counters of the old server mean nothing now
            client = self._client = None
        if url is None:
            return True
        if client is None:
            client = self._client = LlamaServerClient(
                url, timeout_s=self.timeout_s, api_key=self._api_key
            )
        status = client.snapshot(kv_unified=self.kv_unified)
        self.polls += 1
        self._hub.publish(status)
        return True
