"""One streamed completion against llama-server (or the gate in front of it), timed.

The client's clock gives the time to first token (request sent → first token event,
everything the engine made it wait included: a request llama-server defers for want of a
slot waits here) and the gaps between tokens; the engine's own ``timings`` in the final
chunk (``/completion``, llama-server b11312) give the prefill (``prompt_n`` tokens in
``prompt_ms``), the decode (``predicted_n`` in ``predicted_ms``) and the prompt cache
reuse (``cache_n`` tokens taken from the cache).

Requests go to the native ``/completion`` route with a text prompt (no chat template,
so the shapes decide the prefix exactly), ``ignore_eos`` (every reply is ``max_tokens``
long: decode figures compare) and greedy sampling. Only loopback URLs are spoken to
(:func:`homelab.engine.loopback.require_loopback`), without proxies from the environment.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from homelab.engine.loopback import require_loopback
from homelab.errors import EngineError

PATH = "/completion"
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 600.0
"""A loaded engine may take minutes over a long prompt; the bench's own time limit is the
real bound (it cancels what runs)."""


class EngineLostError(EngineError):
    """The engine stopped answering during the bench (it died, or its port closed)."""

    title = "Engine lost during the bench"
    partial: Any = None
    """The bench's report of what completed before (a ``BenchReport``), once it is made."""


class RequestRefusedError(EngineError):
    """The engine (or the gate) answered a bench request with an error."""

    title = "Bench request refused"
    partial: Any = None
    """The bench's report of what completed before (a ``BenchReport``), once it is made."""

    def __init__(self, message: str, *, status: int | None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status


@dataclass(frozen=True, slots=True)
class Sample:
    """One request as measured: client clocks in seconds, engine timings as it sent them."""

    ttft_s: float
    """Request sent → first token received (client clock)."""
    total_s: float
    itl_s: tuple[float, ...]
    """Gaps between consecutive tokens received (client clock)."""
    tokens: int
    """Token events received."""
    prompt_n: int | None
    """Prompt tokens the engine processed (not taken from the cache)."""
    cache_n: int | None
    """Prompt tokens the engine reused from its cache."""
    prompt_ms: float | None
    predicted_n: int | None
    predicted_ms: float | None
    text: str
    started_at: float
    """``time.perf_counter()`` when it was sent (orders samples; not a wall time)."""

    @property
    def prompt_tokens(self) -> int | None:
        if self.prompt_n is None or self.cache_n is None:
            return None
        return self.prompt_n + self.cache_n

    @property
    def prefill_tps(self) -> float | None:
        """Prompt tokens processed per second of the engine's prefill."""
        if not self.prompt_n or not self.prompt_ms:
            return None
        return self.prompt_n / (self.prompt_ms / 1000)

    @property
    def decode_tps(self) -> float | None:
        """Tokens generated per second of the engine's decode."""
        if not self.predicted_n or not self.predicted_ms:
            return None
        return self.predicted_n / (self.predicted_ms / 1000)


def open_client(url: str, *, api_key: str | None = None) -> httpx.AsyncClient:
    """An async client of ``url`` (loopback only, no proxies from the environment).

    Raises:
        NotLoopbackError: ``url`` is not on this machine.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    return httpx.AsyncClient(
        base_url=require_loopback(url.rstrip("/")),
        timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        trust_env=False,
        headers=headers,
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
    )


def _lost(http: httpx.AsyncClient, error: Exception) -> EngineLostError:
    return EngineLostError(
        f"{http.base_url} stopped answering ({type(error).__name__}: {error})",
        hint="Did the engine stop or crash? `status` shows what homelab runs; its log says why.",
    )


async def _post_json(http: httpx.AsyncClient, path: str, body: dict) -> dict:
    try:
        response = await http.post(path, json=body)
    except httpx.TransportError as error:
        raise _lost(http, error) from None
    if response.status_code != 200:
        raise RequestRefusedError(
            f"{http.base_url}{path} answered HTTP {response.status_code}: {response.text[:200]}",
            status=response.status_code,
        )
    data = response.json()
    if not isinstance(data, dict):
        raise RequestRefusedError(f"{http.base_url}{path} did not answer an object", status=200)
    return data


async def fit_tokens(http: httpx.AsyncClient, text: str, n_tokens: int) -> str:
    """``text`` cut to its first ``n_tokens`` tokens by the engine's own tokenizer
    (``/tokenize``, then ``/detokenize``); as it is when it has no more."""
    tokens = (await _post_json(http, "/tokenize", {"content": text, "add_special": False}))[
        "tokens"
    ]
    if len(tokens) <= n_tokens:
        return text
    back = await _post_json(http, "/detokenize", {"tokens": tokens[:n_tokens]})
    return str(back["content"])


def _event(line: str) -> dict | None:
    """The JSON of one ``data:`` line; None for other lines (comments, blanks, [DONE])."""
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if not payload or payload == "[DONE]":
        return None
    data = json.loads(payload)
    return data if isinstance(data, dict) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


async def stream_completion(http: httpx.AsyncClient, prompt: str, max_tokens: int) -> Sample:
    """Send ``prompt`` (streamed, greedy, exactly ``max_tokens`` tokens) and time it.

    Raises:
        EngineLostError: the connection failed or broke off before the final chunk.
        RequestRefusedError: an HTTP error or an error event in the stream.
    """
    body = {
        "prompt": prompt,
        "n_predict": max_tokens,
        "stream": True,
        "temperature": 0,
        "ignore_eos": True,
        "cache_prompt": True,
    }
    started = time.perf_counter()
    arrivals: list[float] = []
    text: list[str] = []
    final: dict | None = None
    try:
        async with http.stream("POST", PATH, json=body) as response:
            if response.status_code != 200:
                detail = (await response.aread()).decode("utf-8", "replace")[:300]
                raise RequestRefusedError(
                    f"{http.base_url}{PATH} answered HTTP {response.status_code}: {detail}",
                    status=response.status_code,
                )
            async for line in response.aiter_lines():
                event = _event(line)
                if event is None:
                    continue
                if "error" in event:
                    raise RequestRefusedError(
                        f"{http.base_url}{PATH}: {str(event['error'])[:300]}", status=200
                    )
                if event.get("content") or event.get("tokens"):
                    arrivals.append(time.perf_counter())
                    text.append(str(event.get("content") or ""))
                if event.get("stop") is True:
                    final = event
                    break
    except httpx.TransportError as error:
        raise _lost(http, error) from None
    except ValueError as error:  # a data line that is not JSON
        raise RequestRefusedError(
            f"{http.base_url}{PATH}: a broken stream ({error})", status=200
        ) from None
    ended = time.perf_counter()
    if final is None:
        raise _lost(http, ConnectionError("the stream ended before its final chunk"))
    if not arrivals:
        raise RequestRefusedError(
            f"{http.base_url}{PATH} sent no token for a request of {max_tokens} token(s)",
            status=200,
        )
    timings = final.get("timings") if isinstance(final.get("timings"), dict) else {}
    assert isinstance(timings, dict)
    return Sample(
        ttft_s=arrivals[0] - started,
        total_s=ended - started,
        itl_s=tuple(b - a for a, b in zip(arrivals, arrivals[1:], strict=False)),
        tokens=len(arrivals),
        prompt_n=_int(timings.get("prompt_n")),
        cache_n=_int(timings.get("cache_n")),
        prompt_ms=_float(timings.get("prompt_ms")),
        predicted_n=_int(timings.get("predicted_n")),
        predicted_ms=_float(timings.get("predicted_ms")),
        text="".join(text),
        started_at=started,
    )
