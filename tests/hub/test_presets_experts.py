"""A MoE preset's facts with its routed experts' bytes: judged offline through the same
offload ladder as its header would be; without them (an older file), the ladder is skipped
and the verdict says so; bad values are a PresetError naming the key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.gpu import cpu
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.hub.preset_facts import lacks_expert_bytes, stand_in
from homelab.hub.preset_fields import PresetError
from homelab.hub.presets import load_preset_file, load_presets
from homelab.plan.judge import judge
from homelab.plan.placement import plan_ram
from homelab.serve.preset_fit import fit_preset_from_facts
from homelab.units import GiB

SHIPPED = {p.key: p for p in load_presets(user_dir=None)}
CARD_16 = synthetic_report(16 * GiB)


@pytest.fixture(autouse=True)
def _plenty_of_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    """System RAM held still (psutil cannot be recorded): 64 GiB available, as a machine for
    gpt-oss-120b has (its experts of 29 blocks hold 46.4 GiB of page cache: with 48 GiB
    available less the 2 GiB headroom they would swap, and the ladder steps down)."""
    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=96 * GiB, available=64 * GiB))


def _older_copy(key: str, folder: Path) -> Path:
    """The shipped preset's file as an older one would be: no ``experts_bytes``."""
    text = SHIPPED[key].source.read_text()
    text = re.sub(r"^experts_bytes = \[.*?\]\n|^experts_bytes = .*\n", "", text, flags=re.M | re.S)
    path = folder / f"{key}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("key", ["qwen3-30b-a3b", "gpt-oss-120b"])
def test_the_offline_verdict_keeps_experts_in_ram_as_the_header_would(key: str) -> None:
    preset = SHIPPED[key]
    assert preset.facts is not None and not lacks_expert_bytes(preset.facts, preset.quant)
    row = fit_preset_from_facts(preset, CARD_16, plan_options(), engine_version=None)
    assert row.source == "preset" and row.ladder_skipped is None
    plan = row.fit.plan
    assert plan is not None and plan.verdict == "fits" and plan.n_gpu_layers is None
    ram = plan_ram(plan)
    assert ram is not None and 0 < ram.n_cpu_moe <= preset.facts.block_count
    # the experts the plan keeps in RAM are the facts' own, block by block
    sizes = preset.facts.quants[preset.quant]
    assert sizes.experts is not None
    assert ram.experts == sum(sizes.experts[: ram.n_cpu_moe])
    # the same stand-in judged directly (no preset code in between) plans the same
    direct = judge(
        stand_in(preset.facts, preset.quant, key),
        key,
        CARD_16,
        plan_options(),
        default_workload=preset.workload,
    )
    assert direct.plan is not None and direct.plan.weights.n_cpu_moe == ram.n_cpu_moe


def test_an_older_preset_without_expert_bytes_skips_the_ladder_and_says_so(
    tmp_path: Path,
) -> None:
    older = load_preset_file(_older_copy("qwen3-30b-a3b", tmp_path), origin="user")
    assert older.facts is not None and lacks_expert_bytes(older.facts, older.quant)
    row = fit_preset_from_facts(older, CARD_16, plan_options(), engine_version=None)
    new = fit_preset_from_facts(
        SHIPPED["qwen3-30b-a3b"], CARD_16, plan_options(), engine_version=None
    )
    assert new.fit.verdict == "fits"
    # without the experts' bytes nothing can stay in RAM: whole layers leave the card
    assert row.fit.verdict == "partial" and row.fit.plan is not None
    assert row.fit.plan.weights.n_cpu_moe == 0
    assert row.ladder_skipped is not None and row.ladder_skipped in row.warnings
    assert "experts_bytes" in row.ladder_skipped and "ladder was skipped" in row.ladder_skipped
    assert row.ladder_skipped in row.fit.plan.warnings  # shown with the plan's working


def test_a_dense_preset_never_says_the_ladder_was_skipped() -> None:
    row = fit_preset_from_facts(SHIPPED["qwen3-8b"], CARD_16, plan_options(), engine_version=None)
    assert row.ladder_skipped is None


def test_a_total_is_shared_by_the_blocks_past_the_leading_dense_ones(tmp_path: Path) -> None:
    path = _older_copy("glm-4.7-flash", tmp_path)  # its per-block list replaced by a total
    text = path.read_text().replace(
        "output_bytes = 260198400\n", "output_bytes = 260198400\nexperts_bytes = 4600000001\n", 1
    )
    path.write_text(text)
    facts = load_preset_file(path, origin="user").facts
    assert facts is not None
    experts = facts.quants["Q4_K_M"].experts
    assert experts is not None and len(experts) == 47
    assert experts[0] == 0 and sum(experts) == 4_600_000_001  # block 0 is dense
    assert max(experts[1:]) - min(experts[1:]) <= 1
    names = [t.name for t in stand_in(facts, "Q4_K_M", "glm").tensors]
    assert "blk.0.ffn_up_exps.weight" not in names and "blk.1.ffn_up_exps.weight" in names


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("-5", "facts.quants.Q4_K_M.experts_bytes"),
        ("0", "facts.quants.Q4_K_M.experts_bytes"),
        ('"lots"', "facts.quants.Q4_K_M.experts_bytes"),
        ("[1, 2, 3]", "facts.quants.Q4_K_M.experts_bytes"),  # not one per block
        ("true", "facts.quants.Q4_K_M.experts_bytes"),
        ("18600000000", "facts.quants.Q4_K_M.file_bytes"),  # leaves nothing for the rest
    ],
)
def test_bad_expert_bytes_are_a_preset_error_naming_the_key(
    tmp_path: Path, value: str, key: str
) -> None:
    path = _older_copy("qwen3-30b-a3b", tmp_path)
    text = path.read_text().replace(
        "output_bytes = 255252480\n", f"output_bytes = 255252480\nexperts_bytes = {value}\n"
    )
    path.write_text(text)
    with pytest.raises(PresetError) as raised:
        load_preset_file(path, origin="user")
    assert repr(key) in raised.value.message
