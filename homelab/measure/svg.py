"""The bench as a picture: TTFT and tokens/s against concurrency, an SVG written by hand.

Two panels over the same concurrency axis (levels evenly spaced, as tested): the time to
first token (median and p90 at the engine; the median through the gate when one ran)
and the aggregate decode rate. Input is the bench's ``--json`` object, so a stored
result draws the same. Pure: returns the SVG text.
"""

from __future__ import annotations

import math
from typing import Any
from xml.sax.saxutils import escape

WIDTH, PANEL_H = 640, 220
LEFT, RIGHT, TOP, GAP, BOTTOM = 64, 24, 40, 48, 40
COLOURS = {"p50": "#1f77b4", "p90": "#9ecae1", "gate": "#d62728", "tps": "#2ca02c"}


def _ticks(top: float) -> list[float]:
    """Round ticks from 0 to the first at or above ``top`` (about five)."""
    if not top > 0:
        return [0.0, 1.0]
    raw = top / 4
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(magnitude * f for f in (1, 2, 2.5, 5, 10) if magnitude * f >= raw)
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def _label(value: float) -> str:
    return f"{value:g}" if value >= 0.01 or value == 0 else f"{value:.1e}"


def _panel(
    y0: float,
    title: str,
    unit: str,
    xs: list[float],
    series: list[tuple[str, list[float | None], str]],
) -> list[str]:
    known = [v for _, values, _ in series for v in values if v is not None]
    ticks = _ticks(max(known, default=1.0))
    top = ticks[-1] or 1.0
    height = PANEL_H - TOP

    def y(value: float) -> float:
        return y0 + TOP + height * (1 - value / top)

    out = [
        f'<text x="{LEFT}" y="{y0 + 24}" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{y0 + TOP + height}" x2="{WIDTH - RIGHT}" y2="{y0 + TOP + height}" stroke="#444"/>',
        f'<line x1="{LEFT}" y1="{y0 + TOP}" x2="{LEFT}" y2="{y0 + TOP + height}" stroke="#444"/>',
    ]
    for tick in ticks:
        out.append(
            f'<line x1="{LEFT}" y1="{y(tick):.1f}" x2="{WIDTH - RIGHT}" y2="{y(tick):.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end">{_label(tick)}</text>'
        )
    out.append(
        f'<text x="14" y="{y0 + TOP + height / 2:.1f}" font-size="11" '
        f'transform="rotate(-90 14 {y0 + TOP + height / 2:.1f})" text-anchor="middle">{escape(unit)}</text>'
    )
    for i, (name, values, colour) in enumerate(series):
        points = [(x, y(v)) for x, v in zip(xs, values, strict=True) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        out += [
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>' for px, py in points
        ]
        out.append(
            f'<text x="{WIDTH - RIGHT - 150}" y="{y0 + 24 + 14 * i}" font-size="11" fill="{colour}">'
            f"● {escape(name)}</text>"
        )
    return out


def bench_svg(report: dict[str, Any]) -> str:
    """The SVG image of a bench's ``--json`` object."""
    results = [r for r in report.get("results", []) if isinstance(r, dict)]
    levels = [int(r["concurrency"]) for r in results]
    span = WIDTH - LEFT - RIGHT
    xs = [LEFT + span * (i + 0.5) / max(len(levels), 1) for i in range(len(levels))]
    ttft = [
        ("TTFT p50 (engine)", [r["ttft_s"]["p50"] for r in results], COLOURS["p50"]),
        ("TTFT p90 (engine)", [r["ttft_s"]["p90"] for r in results], COLOURS["p90"]),
    ]
    if any(r.get("gate") for r in results):
        gate = [(r.get("gate") or {}).get("ttft_s", {}).get("p50") for r in results]
        ttft.append(("TTFT p50 (gate)", gate, COLOURS["gate"]))
    tps = [
        ("decode, all requests", [r.get("decode_tps_aggregate") for r in results], COLOURS["tps"])
    ]
    height = 2 * PANEL_H + GAP + BOTTOM
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        *_panel(
            0,
            f"Time to first token ({report.get('workload')}, {report.get('prompt_tokens')}-token prompts)",
            "seconds",
            xs,
            ttft,
        ),
        *_panel(PANEL_H + GAP, "Aggregate decode rate", "tokens/s", xs, tps),
    ]
    axis_y = 2 * PANEL_H + GAP
    for x, level in zip(xs, levels, strict=True):
        body.append(
            f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="11" text-anchor="middle">{level}</text>'
        )
    body.append(
        f'<text x="{LEFT + span / 2:.1f}" y="{axis_y + 34}" font-size="12" text-anchor="middle">'
        "requests at once</text>"
    )
    body.append("</svg>")
    return "\n".join(body) + "\n"
