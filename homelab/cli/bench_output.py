"""``homelab bench``'s human output: a table per target, the chart, the verdict."""

from __future__ import annotations

from typing import Any

from homelab.measure.summary import seconds
from homelab.plan.vocabulary import slot_count


def _rate(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _share(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"


def print_report(report: Any, data: dict[str, Any], stored: str | None) -> None:
    from homelab.measure.text_chart import chart_lines

    print(
        f"{report.workload} · {report.prompt_tokens}-token prompts · {report.max_tokens} tokens out"
        f" · {report.turns} per client · engine {report.engine_url}"
        + (f" · gate {report.gate_url}" if report.gate_url else "")
    )
    gate = report.gate_url is not None
    head = "  at once  reqs  TTFT p50    p90    p99  prefill t/s  decode t/s  all t/s   ITL p50    p99  cache  deferred"
    print(head + ("  gate TTFT p50" if gate else ""))
    for level in report.levels:
        g = report.gate_level(level.concurrency)
        cut = "" if level.complete else "  (cut short)"
        row = (
            f"  {level.concurrency:>7} {level.requests:>5} {seconds(level.ttft_s.p50):>9} "
            f"{seconds(level.ttft_s.p90):>6} {seconds(level.ttft_s.p99):>6} "
            f"{_rate(level.prefill_tps.p50):>12} {_rate(level.decode_tps.p50):>11} "
            f"{_rate(level.decode_tps_aggregate):>8} {seconds(level.itl_s.p50):>9} "
            f"{seconds(level.itl_s.p99):>6} {_share(level.cache_reuse):>6} "
            f"{'?' if level.deferred is None else level.deferred:>9}"
        )
        if gate:
            row += f"  {seconds(None if g is None else g.ttft_s.p50):>14}"
        print(row + cut)
    for line in chart_lines(data):
        print(line)
    rec = report.recommendation
    print(f"verdict: {rec.reason}")
    if rec.max_concurrent is not None:
        print(
            f"recommended: max_concurrent {rec.max_concurrent} for the gate, {slot_count(rec.slots)} for the plan"
        )
    if report.stopped:
        print(f"stopped early: {report.stopped} (the figures are what completed)")
    if stored:
        print(f"stored: {stored} (`homelab plan` shows it)")
