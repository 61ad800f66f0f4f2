"""A compact text chart of a bench, for terminals: one row per concurrency level, bars
of the median TTFT and of the aggregate decode rate (pure; input is the ``--json`` object)."""

from __future__ import annotations

from typing import Any

from homelab.measure.summary import seconds

BAR = 18
BLOCKS = " ▏▎▍▌▋▊▉█"


def bar(value: float | None, top: float, width: int = BAR) -> str:
    """``value`` of ``top`` as a bar of ``width`` cells (eighths of a cell)."""
    if value is None or not top > 0:
        return " " * width
    eighths = round(max(0.0, min(value / top, 1.0)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[rest] if rest else "")).ljust(width)


def chart_lines(report: dict[str, Any], width: int = BAR) -> list[str]:
    """``   c  TTFT ███▌      1.2 s  decode ██████  45 t/s`` per level."""
    results = [r for r in report.get("results", []) if isinstance(r, dict)]
    ttfts = [r["ttft_s"]["p50"] for r in results]
    rates = [r.get("decode_tps_aggregate") for r in results]
    top_ttft = max((v for v in ttfts if v is not None), default=0.0)
    top_rate = max((v for v in rates if v is not None), default=0.0)
    lines = []
    for r, ttft, rate in zip(results, ttfts, rates, strict=True):
        shown_rate = "?" if rate is None else f"{rate:.1f}" if rate < 100 else f"{rate:.0f}"
        lines.append(
            f"{r['concurrency']:>4}  TTFT {bar(ttft, top_ttft, width)} {seconds(ttft):>7}"
            f"  decode {bar(rate, top_rate, width)} {shown_rate:>6} t/s"
        )
    return lines
