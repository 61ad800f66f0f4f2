"""The SVG and the text chart drawn from a bench's ``--json`` object (pure functions)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from homelab.measure.svg import bench_svg
from homelab.measure.text_chart import bar, chart_lines

SVG = "{http://www.w3.org/2000/svg}"


def _report(gate: bool) -> dict:
    results = []
    for c, ttft, tps in ((1, 0.9, 40.0), (2, 1.4, 70.0), (4, 3.1, 90.0)):
        results.append({
            "concurrency": c, "requests": c, "ttft_s": {"p50": ttft, "p90": ttft * 1.2, "p99": ttft * 1.3},
            "decode_tps_aggregate": tps, "gate": {"ttft_s": {"p50": ttft + 0.5}} if gate else None,
        })  # fmt: skip
    return {"results": results, "workload": "agent", "prompt_tokens": 512}


def test_svg_is_well_formed_with_a_point_per_level_and_series() -> None:
    root = ET.fromstring(bench_svg(_report(gate=False)))
    assert root.tag == f"{SVG}svg"
    assert len(root.findall(f"{SVG}circle")) == 3 * 3  # TTFT p50, p90, decode rate
    assert len(root.findall(f"{SVG}polyline")) == 3
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"1", "2", "4"} <= set(texts) and "requests at once" in texts
    with_gate = ET.fromstring(bench_svg(_report(gate=True)))
    assert len(with_gate.findall(f"{SVG}circle")) == 3 * 4
    assert any("gate" in (t.text or "") for t in with_gate.iter(f"{SVG}text"))


def test_higher_ttft_is_drawn_higher() -> None:
    root = ET.fromstring(bench_svg(_report(gate=False)))
    p50 = [float(c.get("cy", 0)) for c in root.findall(f"{SVG}circle")][:3]
    assert p50[0] > p50[1] > p50[2]  # SVG y grows downwards


def test_text_chart_bars_scale_to_the_largest() -> None:
    lines = chart_lines(_report(gate=False), width=10)
    assert len(lines) == 3 and lines[2].count("█") == 20  # the largest of both fills its bars
    assert "0.9 s" in lines[0] and "3.1 s" in lines[2] and "90.0 t/s" in lines[2]
    assert bar(None, 1.0, 4) == "    " and bar(0.5, 1.0, 4) == "██  "
