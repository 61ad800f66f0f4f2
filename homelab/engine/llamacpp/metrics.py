"""llama-server's ``/metrics``: Prometheus text parsed into named figures.

Pure functions, no I/O. The names are llama-server's (b11312, read from the
running server): counters ``llamacpp:prompt_tokens_total`` (prompt tokens
processed, *excluding* those reused from the cache), ``prompt_tokens_cached_total``,
``prompt_seconds_total``, ``tokens_predicted_total``,
``tokens_predicted_seconds_total``, ``n_decode_total``, ``n_tokens_max``; gauges
``prompt_tokens_seconds`` and ``predicted_tokens_seconds`` (averaged since the
previous scrape: every scrape resets them, so two clients scraping see each
other's zeros), ``requests_processing``, ``requests_deferred``,
``n_busy_slots_per_decode``; ``kv_cache_usage_ratio`` and ``kv_cache_tokens`` when a
build before llama.cpp PR #13660 prints them. A figure the server does not print is None.

Throughput is best taken from the counters between two scrapes
(:func:`window`): tokens over the seconds spent on them, immune to other scrapers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

PREFIX = "llamacpp:"

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$"
)


class MetricsFormatError(ValueError):
    """The text is not Prometheus exposition format (a line that is neither a comment nor a sample)."""


def parse_prometheus_text(text: str) -> dict[str, float]:
    """``{name or name{labels}: value}`` of every sample line; comments and blanks skipped.

    Raises:
        MetricsFormatError: a line is not a sample (e.g. an HTML error page was returned).
    """
    samples: dict[str, float] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise MetricsFormatError(f"line {number} is not a Prometheus sample: {line[:80]!r}")
        try:
            value = float(match.group("value"))  # Prometheus's +Inf, -Inf, NaN too
        except ValueError:
            raise MetricsFormatError(f"line {number} has no number: {line[:80]!r}") from None
        samples[match.group("name") + (match.group("labels") or "")] = value
    return samples


@dataclass(frozen=True, slots=True)
class LlamaMetrics:
    """One scrape of llama-server's ``/metrics`` (None: the server does not print that figure)."""

    prompt_tokens_total: float | None = None
    prompt_tokens_cached_total: float | None = None
    prompt_seconds_total: float | None = None
    tokens_predicted_total: float | None = None
    tokens_predicted_seconds_total: float | None = None
    n_decode_total: float | None = None
    n_tokens_max: float | None = None
    prompt_tokens_seconds: float | None = None
    predicted_tokens_seconds: float | None = None
    requests_processing: float | None = None
    requests_deferred: float | None = None
    n_busy_slots_per_decode: float | None = None
    kv_cache_usage_ratio: float | None = None
    kv_cache_tokens: float | None = None

    @classmethod
    def from_samples(cls, samples: dict[str, float]) -> LlamaMetrics:
        """Pick llama-server's figures out of parsed samples."""
        return cls(**{f.name: samples.get(PREFIX + f.name) for f in fields(cls)})

    @classmethod
    def from_text(cls, text: str) -> LlamaMetrics:
        """Parse a ``/metrics`` body (see :func:`parse_prometheus_text` for errors)."""
        return cls.from_samples(parse_prometheus_text(text))

    @property
    def prompt_tps_overall(self) -> float | None:
        """Prompt tokens per second of prompt processing since start; None before any."""
        return _rate(self.prompt_tokens_total, self.prompt_seconds_total)

    @property
    def gen_tps_overall(self) -> float | None:
        """Generated tokens per second of generation since start; None before any."""
        return _rate(self.tokens_predicted_total, self.tokens_predicted_seconds_total)


def _rate(tokens: float | None, seconds: float | None) -> float | None:
    if tokens is None or seconds is None or tokens <= 0 or seconds <= 0:
        return None
    return tokens / seconds


def _delta(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or after < before:  # a restarted server resets its counters
        return None
    return after - before


@dataclass(frozen=True, slots=True)
class MetricsWindow:
    """What happened between two scrapes, from the counters (None: not known)."""

    prompt_tokens: float | None
    """Prompt tokens processed (not from the cache)."""
    cached_tokens: float | None
    """Prompt tokens reused from the cache."""
    prompt_seconds: float | None
    predicted_tokens: float | None
    predicted_seconds: float | None

    @property
    def prompt_tps(self) -> float | None:
        return _rate(self.prompt_tokens, self.prompt_seconds)

    @property
    def gen_tps(self) -> float | None:
        return _rate(self.predicted_tokens, self.predicted_seconds)

    @property
    def cache_reuse(self) -> tuple[int, int] | None:
        """``(cached, processed)`` prompt tokens in the window, as the response's
        ``timings`` (cache_n, prompt_n) would sum them; None when no prompt was seen."""
        if self.cached_tokens is None or self.prompt_tokens is None:
            return None
        if self.cached_tokens + self.prompt_tokens <= 0:
            return None
        return int(self.cached_tokens), int(self.prompt_tokens)


def window(before: LlamaMetrics, after: LlamaMetrics) -> MetricsWindow:
    """The counters' differences from ``before`` to ``after``."""
    return MetricsWindow(
        prompt_tokens=_delta(before.prompt_tokens_total, after.prompt_tokens_total),
        cached_tokens=_delta(before.prompt_tokens_cached_total, after.prompt_tokens_cached_total),
        prompt_seconds=_delta(before.prompt_seconds_total, after.prompt_seconds_total),
        predicted_tokens=_delta(before.tokens_predicted_total, after.tokens_predicted_total),
        predicted_seconds=_delta(
            before.tokens_predicted_seconds_total, after.tokens_predicted_seconds_total
        ),
    )
