"""Where compute runs out before memory, and what to set because of it (pure).

The recipe's fifth step: load the engine with more and more conversations and watch the
first token. Compute has run out at the first level where

- the median time to first token grows past ``k`` × the single request's (``TTFT_FACTOR``),
  or
- the aggregate decode rate stops growing: it rose by less than ``MIN_GROWTH`` over the
  level before (more conversations, no more tokens per second: they only share them).

The recommendation is the level before it: the gate's ``max_concurrent`` (more requests
at once only queue inside the engine) and the plan's slot count (slots beyond those only
split the KV memory, each holding less context). No limit found: the most tested level
held, and memory's answer stands above it (the bench could not say more).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from homelab.measure.levels import LevelResult
from homelab.measure.stats import ratio

TTFT_FACTOR = 3.0
MIN_GROWTH = 0.10


@dataclass(frozen=True, slots=True)
class Evidence:
    """One level's numbers as the verdict read them."""

    concurrency: int
    ttft_p50_s: float | None
    ttft_ratio: float | None
    """Median TTFT over the single request's."""
    aggregate_tps: float | None
    growth: float | None
    """Aggregate decode rate over the level before's, less one (None for the first)."""


@dataclass(frozen=True, slots=True)
class Recommendation:
    max_concurrent: int | None
    """For the gate; None when nothing was measured."""
    slots: int | None
    """For the plan (``-np``)."""
    limit: str | None
    """``ttft``, ``throughput`` or None (no limit found in the levels tested)."""
    limited_at: int | None
    """The level where compute ran out."""
    memory_slots: int | None
    """The engine's slots (memory's answer)."""
    compute_before_memory: bool | None
    single_ttft_s: float | None
    reason: str
    evidence: tuple[Evidence, ...]
    ttft_factor: float = TTFT_FACTOR
    min_growth: float = MIN_GROWTH

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_concurrent": self.max_concurrent,
            "slots": self.slots,
            "limit": self.limit,
            "limited_at": self.limited_at,
            "memory_slots": self.memory_slots,
            "compute_before_memory": self.compute_before_memory,
            "single_ttft_s": self.single_ttft_s,
            "ttft_factor": self.ttft_factor,
            "min_growth": self.min_growth,
            "reason": self.reason,
            "evidence": [
                {
                    "concurrency": e.concurrency,
                    "ttft_p50_s": e.ttft_p50_s,
                    "ttft_ratio": e.ttft_ratio,
                    "decode_tps_aggregate": e.aggregate_tps,
                    "growth": e.growth,
                }
                for e in self.evidence
            ],
        }


def _s(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} s"


def recommend(
    levels: Sequence[LevelResult],
    *,
    memory_slots: int | None = None,
    ttft_factor: float = TTFT_FACTOR,
    min_growth: float = MIN_GROWTH,
) -> Recommendation:
    """The verdict over the complete levels (a level cut short is not evidence)."""
    measured = sorted(
        (lv for lv in levels if lv.complete and lv.requests and lv.ttft_s.p50 is not None),
        key=lambda lv: lv.concurrency,
    )
    if not measured:
        return Recommendation(
            None,
            None,
            None,
            None,
            memory_slots,
            None,
            None,
            "no concurrency level completed: nothing to recommend",
            (),
            ttft_factor,
            min_growth,
        )
    single = measured[0].ttft_s.p50
    evidence = _evidence(measured, single)
    found = _first_limit(measured, evidence, ttft_factor, min_growth)
    if found is None:
        limit = limited_at = None
        best = measured[-1].concurrency
        reason = (
            f"no limit found up to {best} at once (TTFT {_s(single)} → {_s(measured[-1].ttft_s.p50)}); "
            "compute held at every level tested"
        )
    else:
        limit, at, reason = found
        limited_at, best = measured[at].concurrency, measured[at - 1].concurrency
    before = None
    if memory_slots is not None and limit is not None:
        before = best < memory_slots
        reason += (
            f": compute runs out before memory (memory holds {memory_slots})"
            if before
            else f"; memory holds {memory_slots}, so memory is the limit"
        )
    elif memory_slots is not None:
        reason += f"; memory holds {memory_slots}"
    slots = best if memory_slots is None else min(best, memory_slots)
    return Recommendation(
        slots,
        slots,
        limit,
        limited_at,
        memory_slots,
        before,
        single,
        reason,
        tuple(evidence),
        ttft_factor,
        min_growth,
    )


def _evidence(measured: Sequence[LevelResult], single: float | None) -> list[Evidence]:
    """Each level's TTFT over the single request's and its decode growth over the level before."""
    evidence: list[Evidence] = []
    previous: LevelResult | None = None
    for level in measured:
        growth = None
        if previous is not None:
            growth_ratio = ratio(level.decode_tps_aggregate, previous.decode_tps_aggregate)
            growth = None if growth_ratio is None else growth_ratio - 1
        ttft_ratio = ratio(level.ttft_s.p50, single)
        evidence.append(
            Evidence(
                level.concurrency, level.ttft_s.p50, ttft_ratio, level.decode_tps_aggregate, growth
            )
        )
        previous = level
    return evidence


def _first_limit(
    measured: Sequence[LevelResult],
    evidence: Sequence[Evidence],
    ttft_factor: float,
    min_growth: float,
) -> tuple[str, int, str] | None:
    """The first level where compute ran out: (``ttft`` or ``throughput``, its index, why);
    None when every level held."""
    base = measured[0]
    single = base.ttft_s.p50
    for at in range(1, len(measured)):
        level, previous, seen = measured[at], measured[at - 1], evidence[at]
        if seen.ttft_ratio is not None and seen.ttft_ratio > ttft_factor:
            return (
                "ttft",
                at,
                (
                    f"time to first token at {level.concurrency} at once is {seen.ttft_ratio:.1f}× "
                    f"the {base.concurrency}-request figure ({_s(single)} → {_s(level.ttft_s.p50)}; "
                    f"the limit is {ttft_factor:g}×)"
                ),
            )
        if seen.growth is not None and seen.growth < min_growth:
            return (
                "throughput",
                at,
                (
                    f"aggregate decode stopped growing at {level.concurrency} at once "
                    f"({previous.decode_tps_aggregate:.1f} → {level.decode_tps_aggregate:.1f} tokens/s, "
                    f"{seen.growth:+.0%}; growth under {min_growth:.0%} counts as stopped)"
                ),
            )
    return None
