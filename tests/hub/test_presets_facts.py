"""A preset's ``[facts]``: validated at load, planned like a real header, and agreeing with it.

The agreement tests plan each shipped preset twice on the same card: from the stand-in
built from its facts, and from the model's published geometry (``preset_geometry``, the
keys llama.cpp's converter writes) carrying the same tensors. KV bytes per token and
the tokens that fit must be the same, so a typo in a preset's table fails here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from preset_geometry import GEOMETRY

from homelab.engine.options import plan_options
from homelab.gguf.geometry import geometry_of
from homelab.gguf.header import GgufModel
from homelab.gpu.report import synthetic_report
from homelab.hub.preset_facts import stand_in
from homelab.hub.preset_fields import PresetError
from homelab.hub.presets import load_preset_file, load_presets
from homelab.plan.judge import judge
from homelab.serve.preset_fit import fit_preset, fit_preset_from_facts

PRESETS = {p.key: p for p in load_presets(user_dir=None)}
GIB = 1024**3
CARDS = (16 * GIB, 24 * GIB)


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_every_shipped_preset_has_facts_for_its_default_quant(key: str) -> None:
    facts = PRESETS[key].facts
    assert facts is not None and PRESETS[key].quant in facts.quants
    assert facts.arch == PRESETS[key].arch


@pytest.mark.parametrize("key", sorted(PRESETS))
def test_facts_geometry_is_the_published_geometry(key: str) -> None:
    preset = PRESETS[key]
    assert preset.facts is not None
    from_facts = geometry_of(stand_in(preset.facts, preset.quant, key))
    assert from_facts == geometry_of(GEOMETRY[key]())


@pytest.mark.parametrize("vram", CARDS)
@pytest.mark.parametrize("key", sorted(PRESETS))
def test_plan_from_facts_agrees_with_a_header_of_that_geometry(key: str, vram: int) -> None:
    preset = PRESETS[key]
    assert preset.facts is not None
    facts_model = stand_in(preset.facts, preset.quant, key)
    real = dataclasses.replace(
        GEOMETRY[key](), tensors=facts_model.tensors, file_size=facts_model.header.file_size
    )
    report, options = synthetic_report(vram), plan_options()
    mine = judge(facts_model, key, report, options, default_workload=preset.workload)
    theirs = judge(GgufModel((real,)), key, report, options, default_workload=preset.workload)
    assert mine.verdict == theirs.verdict != "unknown", mine.explanation
    assert mine.kv_bytes_per_token == theirs.kv_bytes_per_token is not None
    assert mine.tokens_fit == theirs.tokens_fit
    assert mine.weights_bytes == theirs.weights_bytes == facts_model.weights_bytes


def test_facts_verdict_is_marked_and_a_header_replaces_it() -> None:
    preset = PRESETS["qwen3.5-9b"]
    report, options = synthetic_report(24 * GIB), plan_options()
    instant = fit_preset_from_facts(preset, report, options)
    assert instant.source == "preset" and instant.fit.verdict == "fits"
    assert instant.fit.file_bytes == 5_629_108_736
    assert preset.facts is not None
    other = dataclasses.replace(
        stand_in(preset.facts, preset.quant, "real").header, file_size=6_000_000_000
    )
    read = fit_preset(preset, report, options, resolve=lambda ref: GgufModel((other,)))
    assert read.source == "header" and read.fit.file_bytes == 6_000_000_000


def test_a_preset_without_facts_says_no_header_was_ever_read(tmp_path: Path) -> None:
    path = tmp_path / "bare.toml"
    path.write_text(_BARE)
    preset = load_preset_file(path, origin="user")
    fit = fit_preset_from_facts(preset, synthetic_report(24 * GIB), plan_options())
    assert fit.source is None and fit.fit.verdict == "unknown"
    assert fit.fit.problem == "Never read" and "no header has been read" in fit.fit.explanation


_BARE = """
name = "Bare"
repo = "tester/Bare-GGUF"
quant = "Q4_K_M"
engine = "llama.cpp"
workload = "chat"
notes = "no facts"
license = "mit"
arch = "llama"
"""
_FACTS = """
[facts]
vocab = 32000
block_count = 4
context_length = 4096
embedding_length = 256
attention.head_count = 4
attention.head_count_kv = 4

[facts.quants.Q4_K_M]
file_bytes = 100_000_000
embedding_bytes = 1_000_000
output_bytes = 1_000_000
"""


def _load(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    load_preset_file(path, origin="user")


def test_a_good_facts_table_loads(tmp_path: Path) -> None:
    _load(tmp_path, _BARE + _FACTS)


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [
        ("block_count = 4", 'block_count = "four"', "facts.block_count"),
        ("block_count = 4", "block_count = 99999999999", "facts.block_count"),  # hung: 1e11 blocks
        ("vocab = 32000", "vocab = 0", "facts.vocab"),
        ("head_count_kv = 4", "head_count_kv = [4, 4]", "facts.attention.head_count_kv"),
        ("[facts.quants.Q4_K_M]", "[facts.quants.Q8_0]", "facts.quants.Q4_K_M"),
        ("output_bytes = 1_000_000", "output_bytes = -1", "facts.quants.Q4_K_M.output_bytes"),
        ("file_bytes = 100_000_000", "file_bytes = 2_000_000", "facts.quants.Q4_K_M.file_bytes"),
        ("output_bytes = 1_000_000", "output_byte = 1", "facts.quants.Q4_K_M.output_byte"),
        ('arch = "llama"\n', "", "arch"),
        ("attention.head_count = 4\n", "", "facts"),
    ],
)
def test_a_bad_facts_table_is_a_preset_error_naming_the_key(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    text = (_BARE + _FACTS).replace(old, new, 1)
    assert text != _BARE + _FACTS
    with pytest.raises(PresetError) as raised:
        _load(tmp_path, text)
    assert f"field {named!r}" in raised.value.message


def test_does_not_fit_says_by_how_many_bytes(tmp_path: Path) -> None:
    from homelab.plan.budget import device_budget

    huge = 30 * GIB
    text = (_BARE + _FACTS).replace("file_bytes = 100_000_000", f"file_bytes = {huge + 10**9}")
    path = tmp_path / "huge.toml"
    path.write_text(text.replace("output_bytes = 1_000_000", f"output_bytes = {huge}"))
    preset = load_preset_file(path, origin="user")
    report = synthetic_report(24 * GIB)
    fit = fit_preset_from_facts(preset, report, plan_options()).fit
    assert fit.verdict == "does_not_fit"
    assert fit.short_by == huge - device_budget(report, None).usable > 0
