"""The shipped MoE presets judged offline on the replayed cards climb the offload ladder
from their own ``experts_bytes``, and those bytes are the ones the model's geometry gives.

glm-4.7-flash and granite-4.0-h-small (18-20 GB at Q4_K_M) cannot give an agent its context
whole on a 16 GB card or a 24 GB one under Wayland: from their facts, the plan keeps the
routed experts of the fewest layers in system RAM and every layer's attention and KV on the
card, as the header would, where the same preset without the experts' bytes (an older
file) leaves less context or whole layers off the card. On a headless 24 GB card they stay
whole. lfm2-8b-a1b (5 GB) fits every shipped card whole and climbs only on a smaller one.
The UD- (dynamic) quants have no derivable experts' bytes: those presets say the ladder was
skipped rather than guess.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from preset_experts import q4_k_m_experts, use_more_bits
from preset_geometry import GEOMETRY

from homelab.engine.options import plan_options
from homelab.gpu import cpu
from homelab.gpu.probe import probe
from homelab.gpu.report import CpuMemory, GpuReport, synthetic_report
from homelab.hub.preset_facts import lacks_expert_bytes
from homelab.hub.presets import Preset, load_preset_file, load_presets
from homelab.plan.placement import plan_ram
from homelab.plan.planner import Plan
from homelab.serve.preset_fit import PresetFit, fit_preset_from_facts
from homelab.units import GiB

SHIPPED = {p.key: p for p in load_presets(user_dir=None)}
FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"
CLIMBING = ("glm-4.7-flash", "granite-4.0-h-small")
DESKTOP_CARDS = ("rtx4060ti16_xorg", "rtx3090_wayland")
"""The replayed 16 GB card under Xorg and the 24 GB one under Wayland."""
AGENT_CONTEXT = 100_000


@pytest.fixture(autouse=True)
def _plenty_of_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    """System RAM held still (psutil cannot be recorded): 48 GiB available."""
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=64 * GiB, available=48 * GiB))


def _card(name: str) -> GpuReport:
    return probe(snapshot=FIXTURES / f"{name}.json", window_s=0)


def _fit(preset: Preset, report: GpuReport) -> tuple[PresetFit, Plan]:
    row = fit_preset_from_facts(preset, report, plan_options(), engine_version=None)
    assert row.source == "preset" and row.fit.plan is not None
    return row, row.fit.plan


def _without_experts(key: str, folder: Path) -> Preset:
    text = SHIPPED[key].source.read_text()
    text = re.sub(r"^experts_bytes = \[.*?\]\n", "", text, flags=re.M | re.S)
    path = folder / f"{key}.toml"
    path.write_text(text)
    older = load_preset_file(path, origin="user")
    assert older.facts is not None and lacks_expert_bytes(older.facts, older.quant)
    return older


@pytest.mark.parametrize("card", DESKTOP_CARDS)
@pytest.mark.parametrize("key", CLIMBING)
def test_a_desktop_card_keeps_the_experts_of_a_few_layers_in_ram(
    key: str, card: str, tmp_path: Path
) -> None:
    preset = SHIPPED[key]
    assert preset.facts is not None
    row, plan = _fit(preset, _card(card))
    assert row.ladder_skipped is None and plan.verdict == "fits"
    assert plan.n_gpu_layers is None  # no whole layer leaves the card
    ram = plan_ram(plan)
    assert ram is not None and 0 < ram.n_cpu_moe < preset.facts.block_count
    experts = preset.facts.quants[preset.quant].experts
    assert experts is not None and ram.experts == sum(experts[: ram.n_cpu_moe])
    # the fewest layers: the context an agent needs, and no more layers than that
    assert plan.candidate.allocation.ctx_per_slot >= AGENT_CONTEXT
    # without the experts' bytes the same card gives less: less context, or layers off it
    older_row, older = _fit(_without_experts(key, tmp_path), _card(card))
    assert older.weights.n_cpu_moe == 0 and older_row.ladder_skipped is not None
    assert older.n_gpu_layers is not None or older.candidate.allocation.ctx_per_slot < AGENT_CONTEXT


@pytest.mark.parametrize("key", CLIMBING)
def test_a_headless_24_gb_card_keeps_them_whole(key: str) -> None:
    row, plan = _fit(SHIPPED[key], _card("rtx3090_headless"))
    assert row.ladder_skipped is None and plan.verdict == "fits"
    assert plan.weights.n_cpu_moe == 0 and plan.n_gpu_layers is None and plan_ram(plan) is None


def test_the_small_moe_fits_the_shipped_cards_whole_and_climbs_on_a_smaller_one() -> None:
    preset = SHIPPED["lfm2-8b-a1b"]
    assert preset.facts is not None
    for card in (*DESKTOP_CARDS, "rtx3090_headless"):
        row, plan = _fit(preset, _card(card))
        assert row.ladder_skipped is None and plan.verdict == "fits"
        assert plan.weights.n_cpu_moe == 0
    row, plan = _fit(preset, synthetic_report(4 * GiB))
    ram = plan_ram(plan)
    assert row.ladder_skipped is None and plan.verdict == "fits" and plan.n_gpu_layers is None
    assert ram is not None and ram.n_cpu_moe > 2  # blocks 0 and 1 are dense: nothing to move
    experts = preset.facts.quants[preset.quant].experts
    assert experts is not None and experts[:2] == (0, 0)
    assert ram.experts == sum(experts[: ram.n_cpu_moe])


@pytest.mark.parametrize("key", ["qwen3-30b-a3b", *CLIMBING, "lfm2-8b-a1b"])
def test_the_experts_bytes_are_the_q4_k_m_rules_on_the_published_geometry(key: str) -> None:
    preset = SHIPPED[key]
    assert preset.quant == "Q4_K_M" and preset.facts is not None
    assert preset.facts.quants[preset.quant].experts == q4_k_m_experts(GEOMETRY[key]())


def test_the_more_bits_rule_is_llama_quantizes() -> None:
    """Qwen3-30B-A3B's 48 layers: Q6_K ffn_down on i < 6, i >= 42, (i - 6) % 3 == 2."""
    chosen = [il for il in range(48) if use_more_bits(il, 48)]
    assert chosen == [
        0,
        1,
        2,
        3,
        4,
        5,
        8,
        11,
        14,
        17,
        20,
        23,
        26,
        29,
        32,
        35,
        38,
        41,
        *range(42, 48),
    ]


def test_a_geometry_llama_quantize_would_give_a_fallback_type_is_refused() -> None:
    header = GEOMETRY["glm-4.7-flash"]()
    metadata = dict(header.metadata)
    metadata["deepseek2.expert_feed_forward_length"] = 1500  # not a multiple of 256
    with pytest.raises(ValueError, match="falls back"):
        q4_k_m_experts(dataclasses.replace(header, metadata=metadata))


@pytest.mark.parametrize("key", sorted(SHIPPED))
def test_a_moe_preset_lacks_experts_bytes_only_for_a_dynamic_quant(key: str) -> None:
    preset = SHIPPED[key]
    assert preset.facts is not None
    for quant in preset.facts.quants:
        if lacks_expert_bytes(preset.facts, quant):
            assert quant.startswith("UD-"), f"{key} {quant}: derive its experts' bytes"


def test_a_preset_of_dynamic_quants_only_says_the_ladder_was_skipped() -> None:
    row, plan = _fit(SHIPPED["qwen3.6-35b-a3b"], synthetic_report(16 * GiB))
    assert row.ladder_skipped is not None and "experts_bytes" in row.ladder_skipped
    assert plan.weights.n_cpu_moe == 0
