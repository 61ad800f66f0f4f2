"""Plan steps as rows: each row's value is the plan's own figure, and the rendered text is
the ``--json`` "steps" contract (a list of strings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import synthetic_report
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.plan.working import Step, render_step, render_steps
from homelab.units import GiB
from tests.factory import write_gguf

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"


def _row(steps: tuple[Step, ...], what: str) -> Step:
    (row,) = [s for s in steps if s.what.startswith(what)]
    return row


@pytest.mark.parametrize(
    ("arch", "snapshot"),
    [
        ("llama", "rtx3090_wayland.json"),
        ("gemma3", "rtx4060ti16_xorg.json"),
        ("qwen3next", "rtx3090_headless.json"),
        ("deepseek2", None),
    ],
)
def test_values_are_the_plans_bytes(tmp_path: Path, arch: str, snapshot: str | None) -> None:
    model = read_model(write_gguf(arch, tmp_path / f"{arch}.gguf"))
    report = probe(snapshot=GPU / snapshot, window_s=0) if snapshot else synthetic_report(8 * GiB)
    plan = make_plan(model, "m", report, PlanRequest(parallel=2))
    steps, b, alloc = plan.steps, plan.budget, plan.candidate.allocation
    assert all(isinstance(s, Step) for s in steps)

    assert _row(steps, "Memory").value == b.total
    terms = [s for s in steps if s.sign == "−" and s.level == 1]
    assert [t.value for t in terms] == [b.reserved, b.desktop, b.other, b.headroom]
    usable = _row(steps, "usable by llama-server")
    assert usable.value == b.usable == b.total - sum(t.value for t in terms)
    assert _row(steps, "Weights on the card").value == plan.weights_on_device
    compute = _row(steps, "Engine: compute buffer")
    engine = plan.candidate.engine
    assert compute.value == engine.compute_buffer - engine.fa_scratch
    assert _row(steps, "Left for conversations").value == plan.left_for_conversations
    per_token = next(s for s in steps if s.sign == "=" and "per token" in s.formula)
    assert per_token.value == alloc.bytes_per_token
    groups = [s for s in steps if s.level == 1 and not s.what and not s.sign]
    if not plan.geometry.swa_layers:  # full layers only: the groups add up to the token's bytes
        assert sum(g.value for g in groups) == alloc.bytes_per_token
    assert _row(steps, "Tokens that fit").value == plan.tokens_fit
    assert _row(steps, "Slots for").value == plan.settings.n_seq == 2
    assert _row(steps, "KV allocated").value == alloc.total
    spare = _row(steps, "Spare after the plan").value
    assert spare == b.usable - plan.weights_on_device - engine.total - alloc.total

    lines = plan_to_dict(plan, [])["steps"]
    assert lines == [render_step(s) for s in steps] and all(isinstance(x, str) for x in lines)
    assert lines[0].startswith(f"Model: {plan.geometry.arch}, ")
    assert lines[steps.index(usable)].startswith(f"  = usable by llama-server: {b.usable:,} B")


def test_render_shapes() -> None:
    assert render_step(Step("Memory", "24 B in all", 24)) == "Memory: 24 B in all"
    assert render_step(Step("other", "3 B", 3, level=1, sign="−")) == "  − other: 3 B"
    assert render_step(Step("KV per token at q8_0/q8_0")) == "KV per token at q8_0/q8_0:"
    assert render_step(Step("", "2 × 3 = 6 B", 6, level=1)) == "  2 × 3 = 6 B"
    assert render_step(Step("Engine: compute", "5 B", 5, sep=" ")) == "Engine: compute 5 B"
    assert render_steps([Step("a", "b"), Step("c", "d")]) == ["a: b", "c: d"]
