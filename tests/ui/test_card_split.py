"""The card panel with a plan split over two cards: every card's bar, and which layers each holds."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import Static

from homelab.engine.options import plan_options
from homelab.gguf.header import GgufModel, TensorInfo
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.plan.budget import device_budget
from homelab.plan.pipeline import plan_model
from homelab.plan.workload import CHAT
from homelab.ui.widgets.card import CardPanel
from homelab.units import MiB
from tests.factory import write_gguf

SNAPSHOT = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "gpu"
    / "constructed_mixed_24_12_display_small.json"
)


class _Host(App):
    def compose(self) -> ComposeResult:
        yield CardPanel(id="card")


def test_card_panel_shows_each_cards_layers(tmp_path: Path) -> None:
    header = read_model(write_gguf("llama", tmp_path / "llama.gguf")).header
    tensors = [TensorInfo("token_embd.weight", (1,), 0, "F32", 0, 500 * MiB)]
    tensors += [
        TensorInfo(f"blk.{i}.ffn_up.weight", (1,), 0, "F32", 0, 850 * MiB) for i in range(32)
    ]
    tensors.append(TensorInfo("output.weight", (1,), 0, "F32", 0, 1000 * MiB))
    model = GgufModel((dataclasses.replace(header, tensors=tuple(tensors)),))
    report = probe(snapshot=SNAPSHOT, window_s=0)
    plan = plan_model(model, "m.gguf", report, plan_options(workload=CHAT))
    small, big = plan.devices
    budgets = [device_budget(report, d.index) for d in report.devices]
    shown: list[str] = []

    async def drive() -> None:
        app = _Host()
        async with app.run_test(size=(100, 30)) as pilot:
            panel = app.query_one(CardPanel)
            panel.show(report, budgets, plan, True)
            await pilot.pause()
            shown.append(str(panel.query_one("#card-text", Static).render()))

    asyncio.run(drive())
    text = shown[0]
    assert "GPU 0: NVIDIA GeForce RTX 3090" in text and "GPU 1: NVIDIA GeForce RTX 3060" in text
    assert f"CUDA1: blocks 0–{small.n_blocks - 1} ({small.layers} of the split)" in text
    assert f"CUDA0: blocks {big.first_block}–31 + output layer ({big.layers} of the split)" in text
    # each bar's engine part is that card's share, not the plan's total
    assert text.count("weights (plan)") == 2
