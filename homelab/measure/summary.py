"""The words a plan shows next to its memory answer, from a stored bench (pure): "memory
holds 4 agents; measured: 1 agent TTFT 0.9 s, 4 agents 3.1 s"."""

from __future__ import annotations

from typing import Any


def seconds(value: float | None) -> str:
    """``0.05 s``, ``0.9 s``, ``3.1 s``, ``12 s``; ``?`` when unknown."""
    if value is None:
        return "?"
    if value >= 10:
        return f"{value:.0f} s"
    return f"{value:.1f} s" if value >= 0.1 else f"{value:.2f} s"


def _noun(workload: str, count: int) -> str:
    word = "agent" if workload == "agent" else "chat"
    return word if count == 1 else f"{word}s"


def measured_line(record: dict[str, Any], memory_slots: int | None) -> str:
    """One stored bench in a line: what memory holds, each level's median TTFT, and the
    recommendation when compute runs out first."""
    report = record["report"]
    workload = str(report.get("workload"))
    levels = [
        f"{r['concurrency']} {_noun(workload, r['concurrency'])} TTFT {seconds(r['ttft_s']['p50'])}"
        for r in report["results"]
        if isinstance(r, dict) and r.get("requests")
    ]
    head = (
        ""
        if memory_slots is None
        else f"memory holds {memory_slots} {_noun(workload, memory_slots)}; "
    )
    line = f"{head}measured: {', '.join(levels) or 'nothing completed'}"
    rec = report.get("recommendation") or {}
    if rec.get("limited_at"):
        line += f"; compute runs out at {rec['limited_at']}: max_concurrent {rec['max_concurrent']}"
    when = str(record.get("recorded_at", ""))[:10]
    return f"{line} ({report.get('prompt_tokens')}-token prompts, {when})"


def decode_measured(records: list[dict[str, Any]]) -> tuple[float, str] | None:
    """The newest stored bench's median decode rate of one request at a time (what the
    decode bound estimates), and where it comes from in words; None when none measured it."""
    for record in sorted(records, key=lambda r: str(r.get("recorded_at")), reverse=True):
        for result in record["report"]["results"]:
            if not isinstance(result, dict) or result.get("concurrency") != 1:
                continue
            tps = (result.get("decode_tps") or {}).get("p50")
            if isinstance(tps, (int, float)) and not isinstance(tps, bool) and tps > 0:
                when = str(record.get("recorded_at", ""))[:10]
                return float(tps), f"homelab bench, one request at a time, median, {when}"
    return None
