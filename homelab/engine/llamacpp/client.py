"""Live status of a running llama-server: ``/health``, ``/slots``, ``/metrics``, ``/props``.

:class:`LlamaServerClient` asks one server over HTTP (httpx). :meth:`~LlamaServerClient.health`
never raises: it answers a typed :class:`Health` (ready, loading, down, unresponsive,
error). The other endpoints raise :class:`EngineUnavailableError` (an ``EngineError``)
when the server cannot answer; :meth:`~LlamaServerClient.snapshot` catches those and
returns a :class:`LiveStatus` with what it could read, which :func:`status_line`
prints in one line (parsing of the JSON answers lives in
:mod:`homelab.engine.llamacpp.answers`).

Facts of llama-server (b11312) this relies on: ``/health`` answers 503
``{"error": {"message": "Loading model", ...}}`` while the model loads (its HTTP
server starts first) and 200 ``{"status": "ok"}`` once ready; every other endpoint
also answers 503 while loading; ``/metrics`` answers 501 without ``--metrics``;
``/slots`` lists each slot's ``n_ctx`` and held tokens. No metric gives KV usage
(see :mod:`homelab.engine.llamacpp.metrics`): KV use is the slots' held tokens over their
context.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum
from typing import Any, Self

import httpx

from homelab.engine.engine_key import key_headers
from homelab.engine.llamacpp.answers import ServerProps, SlotStatus, parse_props, parse_slot
from homelab.engine.llamacpp.metrics import LlamaMetrics, MetricsFormatError, MetricsWindow, window
from homelab.engine.loopback import loopback_client
from homelab.errors import EngineError


class EngineUnavailableError(EngineError):
    """The server did not answer an endpoint: not running, still loading, too busy to
    answer in time, the endpoint is switched off (``--metrics``), or it is not llama-server."""

    title = "Engine unavailable"


class HealthState(Enum):
    """What ``/health`` says."""

    READY = "ready"  # 200
    LOADING = "loading"  # 503 while the model loads
    DOWN = "down"  # nothing listens (connection refused, host unreachable)
    UNRESPONSIVE = "unresponsive"  # connected, no answer in time
    ERROR = "error"  # an answer that is neither ready nor loading


@dataclass(frozen=True, slots=True)
class Health:
    """``state`` plus the HTTP status (None without an answer) and a short detail."""

    state: HealthState
    http_status: int | None
    detail: str

    @property
    def ready(self) -> bool:
        return self.state is HealthState.READY


@dataclass(frozen=True, slots=True)
class LiveStatus:
    """One look at the server. ``slots``/``metrics`` are None when they could not be read
    (``notes`` says why). Rates are tokens per second over the window since the client's
    previous snapshot, or since start when nothing happened in the window."""

    url: str
    taken_at: float
    health: Health
    slots: tuple[SlotStatus, ...] | None = None
    metrics: LlamaMetrics | None = None
    prompt_tps: float | None = None
    gen_tps: float | None = None
    cache_reuse: tuple[int, int] | None = None
    """(cached, processed) prompt tokens of the latest window that saw a prompt."""
    kv_tokens: int | None = None
    kv_capacity: int | None = None
    notes: tuple[str, ...] = ()
    window: MetricsWindow | None = None
    """The counters' differences since the client's previous scrape (None on the first)."""
    window_s: float | None = None
    """Wall-clock seconds since that scrape."""

    @property
    def kv_per_slot(self) -> tuple[tuple[int, int, int], ...] | None:
        """``(slot id, KV cells held, slot context)`` of each slot (None without /slots)."""
        return None if self.slots is None else tuple((s.id, s.tokens, s.n_ctx) for s in self.slots)

    @property
    def processing(self) -> int | None:
        if self.metrics is not None and self.metrics.requests_processing is not None:
            return int(self.metrics.requests_processing)
        if self.slots is not None:
            return sum(1 for s in self.slots if s.is_processing)
        return None

    @property
    def deferred(self) -> int | None:
        if self.metrics is not None and self.metrics.requests_deferred is not None:
            return int(self.metrics.requests_deferred)
        return None

    @property
    def busy_slots(self) -> int | None:
        return None if self.slots is None else sum(1 for s in self.slots if s.is_processing)


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:200]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return str(body["error"].get("message", ""))
    return str(body)[:200]


class LlamaServerClient:
    """A small HTTP client of one llama-server (``base_url`` like ``http://127.0.0.1:8080``).

    ``timeout_s`` bounds every request: ``/slots`` and ``/metrics`` wait for the server's
    main loop, so a server busy with a long prompt answers them late. Requests go through
    the loopback client (:mod:`homelab.engine.loopback`): no proxies from the environment,
    and ``base_url`` must be on 127.0.0.1, ::1 or localhost (else ``NotLoopbackError``).
    ``api_key``: the engine's own key, sent with every request (an engine behind homelab's
    gate answers 401 without it; see :mod:`homelab.engine.engine_key`); None: it has none.
    Use as a context manager or call :meth:`close`.
    """

    def __init__(self, base_url: str, timeout_s: float = 5.0, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = loopback_client(
            self.base_url, timeout_s=timeout_s, headers=key_headers(api_key)
        )
        self._previous: LlamaMetrics | None = None
        self._previous_at: float | None = None
        self._last_reuse: tuple[int, int] | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- endpoints -------------------------------------------------------------------

    def health(self) -> Health:
        """``/health`` as a :class:`Health`; never raises."""
        try:
            response = self._http.get("/health")
        except httpx.TimeoutException:
            return Health(HealthState.UNRESPONSIVE, None, f"{self.base_url} did not answer in time")
        except httpx.TransportError as error:
            return Health(
                HealthState.DOWN,
                None,
                f"{self.base_url} unreachable ({type(error).__name__}: {error})",
            )
        if response.status_code == 200:
            return Health(HealthState.READY, 200, "ok")
        message = _error_message(response)
        if response.status_code == 503:
            return Health(HealthState.LOADING, 503, message or "loading")
        return Health(HealthState.ERROR, response.status_code, message or response.reason_phrase)

    def _get(self, path: str) -> httpx.Response:
        try:
            response = self._http.get(path)
        except httpx.TimeoutException:
            raise EngineUnavailableError(
                f"llama-server at {self.base_url} did not answer {path} in time",
                hint="It may be busy with a long prompt; try again, or raise the client timeout.",
            ) from None
        except httpx.TransportError as error:
            raise EngineUnavailableError(
                f"llama-server at {self.base_url} is unreachable ({type(error).__name__}: {error})",
                hint="Is it running? `homelab status` shows what homelab started.",
            ) from None
        if response.status_code != 200:
            message = _error_message(response)
            hint = {
                501: "Start it with --metrics (homelab's argv does).",
                401: "It wants its own key, which homelab keeps in the engine's record "
                "(engine.json); a record that lost it: `homelab serve MODEL --replace` "
                "starts the engine again with a fresh key.",
            }.get(response.status_code)
            raise EngineUnavailableError(
                f"llama-server at {self.base_url} answered {path} with HTTP {response.status_code}: {message}",
                hint=hint,
            )
        return response

    def _json(self, path: str) -> Any:
        response = self._get(path)
        try:
            return response.json()
        except ValueError:
            raise EngineUnavailableError(
                f"{self.base_url}{path} did not answer JSON: {response.text[:120]!r}",
                hint="Is this port llama-server's?",
            ) from None

    def _foreign(self, path: str, what: object) -> EngineUnavailableError:
        """``path`` answered, but not as llama-server does."""
        return EngineUnavailableError(
            f"{self.base_url}{path}: {what}", hint="Is this port llama-server's?"
        )

    def slots(self) -> tuple[SlotStatus, ...]:
        """``/slots``. Raises EngineUnavailableError (see the class) or on an unexpected answer."""
        data = self._json("/slots")
        if not isinstance(data, list):
            raise self._foreign("/slots", f"expected a list, got {type(data).__name__}")
        try:
            return tuple(parse_slot(item) for item in data)
        except ValueError as error:
            raise self._foreign("/slots", error) from None

    def metrics(self) -> LlamaMetrics:
        """``/metrics`` (needs ``--metrics``). Raises EngineUnavailableError (see the class)."""
        response = self._get("/metrics")
        try:
            return LlamaMetrics.from_text(response.text)
        except MetricsFormatError as error:
            raise self._foreign("/metrics", error) from None

    def props(self) -> ServerProps:
        """``GET /props``. Raises EngineUnavailableError (see the class)."""
        data = self._json("/props")
        try:
            return parse_props(data)
        except TypeError as error:
            raise self._foreign("/props", error) from None

    # -- the combined view -------------------------------------------------------------

    def snapshot(self, *, kv_unified: bool | None = None) -> LiveStatus:
        """Health, slots and metrics in one :class:`LiveStatus`; never raises.

        ``kv_unified``: the server shares one KV pool among its slots (``-kvu``); each slot
        then reports the whole pool as its ``n_ctx``, so the capacity is not their sum.
        """
        health = self.health()
        now = time.time()
        if not health.ready:
            return LiveStatus(self.base_url, now, health, cache_reuse=self._last_reuse)
        notes: list[str] = []
        slots: tuple[SlotStatus, ...] | None = None
        metrics: LlamaMetrics | None = None
        try:
            slots = self.slots()
        except EngineUnavailableError as error:
            notes.append(error.message)
        try:
            metrics = self.metrics()
        except EngineUnavailableError as error:
            notes.append(error.message)
        prompt_tps = gen_tps = window_s = None
        delta: MetricsWindow | None = None
        if metrics is not None:
            if self._previous is not None and self._previous_at is not None:
                delta = window(self._previous, metrics)
                window_s = now - self._previous_at
            if delta is not None and delta.cache_reuse is not None:
                self._last_reuse = delta.cache_reuse
            prompt_tps = (delta.prompt_tps if delta else None) or metrics.prompt_tps_overall
            gen_tps = (delta.gen_tps if delta else None) or metrics.gen_tps_overall
            self._previous, self._previous_at = metrics, now
        kv_tokens = kv_capacity = None
        if slots:
            kv_tokens = sum(s.tokens for s in slots)
            kv_capacity = max(s.n_ctx for s in slots) if kv_unified else sum(s.n_ctx for s in slots)
        return LiveStatus(
            url=self.base_url,
            taken_at=now,
            health=health,
            slots=slots,
            metrics=metrics,
            prompt_tps=prompt_tps,
            gen_tps=gen_tps,
            cache_reuse=self._last_reuse,
            kv_tokens=kv_tokens,
            kv_capacity=kv_capacity,
            notes=tuple(notes),
            window=delta,
            window_s=window_s,
        )


def _tps(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def status_line(status: LiveStatus) -> str:
    """One compact line: state, requests, prompt and generation speed, KV and slots, cache reuse."""
    state = status.health.state
    if state is not HealthState.READY:
        return f"{state.value} · {status.health.detail}"
    parts = ["ready"]
    processing, deferred = status.processing, status.deferred
    parts.append(f"{'?' if processing is None else processing} processing")
    parts.append(f"{'?' if deferred is None else deferred} deferred")
    parts.append(f"prompt {_tps(status.prompt_tps)} t/s")
    parts.append(f"gen {_tps(status.gen_tps)} t/s")
    if status.kv_tokens is not None and status.kv_capacity:
        share = status.kv_tokens / status.kv_capacity
        parts.append(f"KV {status.kv_tokens:,}/{status.kv_capacity:,} tok ({share:.0%})")
    if status.slots is not None:
        parts.append(f"slots {status.busy_slots}/{len(status.slots)} busy")
    if status.cache_reuse is not None:
        cached, processed = status.cache_reuse
        parts.append(f"cache {cached:,}/{cached + processed:,} prompt tok reused")
    if status.notes:
        parts.append("! " + status.notes[0])
    return " · ".join(parts)
