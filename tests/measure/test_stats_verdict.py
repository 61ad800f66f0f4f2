"""Percentiles and the verdict on bare numbers (no engine)."""

from __future__ import annotations

import statistics

import pytest

from homelab.measure.levels import LevelResult
from homelab.measure.stats import Summary, percentile
from homelab.measure.verdict import recommend


def test_percentiles_match_the_inclusive_method() -> None:
    data = [0.9, 3.1, 1.2, 0.4, 2.2, 5.0, 0.7]
    cuts = statistics.quantiles(data, n=100, method="inclusive")  # cuts[k-1] is the k-th percentile
    assert percentile(data, 50) == pytest.approx(cuts[49])
    assert percentile(data, 90) == pytest.approx(cuts[89])
    assert percentile(data, 99) == pytest.approx(cuts[98])
    assert percentile(data, 0) == min(data) and percentile(data, 100) == max(data)


def test_unknown_is_none_and_one_sample_is_every_percentile() -> None:
    assert Summary.of([]) == Summary(None, None, None, 0)
    assert Summary.of([2.5]) == Summary(2.5, 2.5, 2.5, 1)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def level(c: int, ttft: float, aggregate: float, *, complete: bool = True) -> LevelResult:
    """A level with a median TTFT and an aggregate decode rate (the verdict's inputs)."""
    nothing = Summary.of([])
    return LevelResult(
        concurrency=c, requests=c, planned=c, complete=complete, wall_s=1.0,
        ttft_s=Summary.of([ttft]), prefill_s=nothing, prefill_tps=nothing, decode_tps=nothing,
        itl_s=nothing, decode_tps_aggregate=aggregate, cache_reuse=None, prompt_tokens=None,
        deferred=None,
    )  # fmt: skip


def test_ttft_past_k_times_the_single_request_ends_it() -> None:
    rec = recommend(
        [level(1, 0.9, 30), level(2, 1.1, 55), level(4, 1.9, 90), level(8, 3.1, 120)],
        memory_slots=8,
        ttft_factor=3.0,
    )
    assert (rec.limit, rec.limited_at, rec.max_concurrent, rec.slots) == ("ttft", 8, 4, 4)
    assert rec.compute_before_memory is True
    assert rec.single_ttft_s == 0.9
    assert [round(e.ttft_ratio or 0, 2) for e in rec.evidence] == [1.0, 1.22, 2.11, 3.44]
    assert "3.4×" in rec.reason and "memory holds 8" in rec.reason


def test_throughput_that_stops_growing_ends_it() -> None:
    rec = recommend([level(1, 1.0, 30), level(2, 1.2, 58), level(4, 1.5, 60)], memory_slots=32)
    assert (rec.limit, rec.limited_at, rec.max_concurrent) == ("throughput", 4, 2)
    assert rec.evidence[2].growth == pytest.approx(60 / 58 - 1)
    assert "compute runs out before memory (memory holds 32)" in rec.reason


def test_no_limit_found_keeps_the_most_tested_and_memory_caps_it() -> None:
    rec = recommend([level(1, 1.0, 30), level(2, 1.1, 60), level(4, 1.3, 110)], memory_slots=2)
    assert rec.limit is None and rec.limited_at is None
    assert rec.max_concurrent == 2 and rec.slots == 2  # beyond the slots requests only wait
    assert rec.compute_before_memory is None
    assert "no limit found up to 4" in rec.reason


def test_levels_cut_short_are_not_evidence() -> None:
    rec = recommend([level(1, 1.0, 30), level(2, 9.0, 10, complete=False)])
    assert rec.limit is None and rec.max_concurrent == 1 and len(rec.evidence) == 1
    empty = recommend([level(1, 1.0, 30, complete=False)], memory_slots=4)
    assert empty.max_concurrent is None and empty.evidence == ()
