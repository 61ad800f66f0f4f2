"""Percentiles of measured figures (pure, no I/O).

Percentiles are linearly interpolated between the closest ranks (the "linear" method of
NumPy and of Python's ``statistics.quantiles(method="inclusive")``): with one sample every
percentile is that sample; with none they are None (unknown, never 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) of ``values``; None when there are none.

    Raises:
        ValueError: ``q`` is outside 0–100 or a value is not a finite number.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {q}")
    if not values:
        return None
    ordered = sorted(values)
    if not all(math.isfinite(v) for v in ordered):
        raise ValueError("percentiles of non-finite values")
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class Summary:
    """p50, p90, p99 and the count of a set of figures (None: no figures)."""

    p50: float | None
    p90: float | None
    p99: float | None
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Summary:
        data = list(values)
        return cls(percentile(data, 50), percentile(data, 90), percentile(data, 99), len(data))

    def pick(self, *names: str) -> dict[str, float | None]:
        """``{"p50": …, …}`` of the named percentiles (the ``--json`` shape)."""
        return {name: getattr(self, name) for name in names}


def ratio(part: float | None, whole: float | None) -> float | None:
    """``part / whole``; None when either is unknown or ``whole`` is 0."""
    if part is None or whole is None or whole == 0:
        return None
    return part / whole
