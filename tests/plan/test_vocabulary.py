"""One vocabulary for the TUI and the CLI (issue 21): the same words for the same figures
(tokens allocated vs tokens that fit, free vs usable after headroom), every size written by
one formatter, and ``homelab plan PRESET`` planned as the TUI plans it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.options import plan_options
from homelab.gguf.file_name import quant_tag, split_info
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.plan.judge import judge
from homelab.plan.planner import Plan
from homelab.plan.vocabulary import allocated_words, summary_words
from homelab.ui.catalog import plan_words
from homelab.units import format_bytes

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"
WAYLAND = FIXTURES / "rtx3090_wayland.json"


def _plan(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _line(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(start))


def _smollm2_plan(smollm2_gguf: Path) -> Plan:
    report = probe(snapshot=WAYLAND, window_s=0)
    fit = judge(read_model(str(smollm2_gguf)), "smollm2", report, plan_options())
    assert fit.plan is not None
    return fit.plan


def test_a_slot_given_more_cells_than_its_trained_context_says_so_once(
    capsys, smollm2_gguf: Path
) -> None:
    code, out, _ = _plan(
        capsys, str(smollm2_gguf), "--ctx", "16384", "--parallel", "1", "--vram", "16GiB"
    )
    assert code == 0
    slots = _line(out, "Slots for")
    # was "1 × 8,192 tokens (16,384 each)": two figures for one slot, neither named
    assert "16,384 each)" not in slots
    assert "1 slot × 8,192 tokens (16,384 cells allocated to each; a request is capped at " in slots
    assert "the 8,192 tokens the model was trained on)" in slots


def test_the_weights_line_says_what_is_on_the_card_and_what_stays_in_ram(
    capsys, smollm2_gguf: Path
) -> None:
    code, out, _ = _plan(capsys, str(smollm2_gguf), "--gpu-snapshot", str(WAYLAND))
    assert code == 0
    weights = _line(out, "Weights on the card: ")
    assert "(the input embedding stays in system RAM)" not in weights
    plan = _smollm2_plan(smollm2_gguf)
    embedding = plan.weights.embedding
    assert embedding is not None and 0 < embedding < plan.weights_on_device
    assert "(every block and the output layer)" in weights
    assert f"in system RAM: the input embedding, {format_bytes(embedding)}" in weights
    assert f"the file holds {format_bytes(plan.weights.total)} of weights" in weights


def test_slots_capped_at_the_trained_context_say_the_cap_in_the_cli_and_the_tui(
    capsys, smollm2_gguf: Path
) -> None:
    plan = _smollm2_plan(smollm2_gguf)
    assert plan.settings.n_seq == 32 and plan.candidate.allocation.ctx_per_slot == 8192
    capped = "32 slots × 8,192 tokens allocated (each capped at the 8,192 tokens it was trained on)"
    assert allocated_words(plan) == capped
    whole, compact = plan_words(plan)  # the models menu's verdict
    assert whole == f"fits: {capped}"
    assert compact == "fits: 32×8,192 (trained cap)"
    code, out, _ = _plan(capsys, str(smollm2_gguf), "--gpu-snapshot", str(WAYLAND))
    assert code == 0
    assert f"Fits. {summary_words(plan)}, KV " in out
    assert f"{capped}, {plan.tokens_fit:,} tokens fit" in out
    assert "(each capped at the 8,192 tokens it was trained on)" in _line(out, "Slots for")


def test_a_does_not_fit_line_formats_every_figure(capsys, smollm2_gguf: Path) -> None:
    code, _, err = _plan(capsys, str(smollm2_gguf), "--vram", "16GiB", "--ctx", "4000000")
    assert code == 3 and "Traceback" not in err
    assert "What fits with 1 slot: a context of " in err
    assert not re.search(r"[0-9]{4,}", err), err  # 2359296 was printed bare


def test_plan_takes_a_preset_name_and_plans_it_offline_from_its_facts(
    capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = _plan(capsys, "gemma-3-12b", "--gpu-snapshot", str(WAYLAND))
    assert code == 0, err
    assert out.startswith("! Planned from the preset's own facts: the Hub cannot be reached (")
    assert "HF_HUB_OFFLINE" in out.splitlines()[0]
    assert "Model: gemma3, 48 layers" in out
    command = out.splitlines()[-1]
    assert command.startswith("llama-server -hf unsloth/gemma-3-12b-it-GGUF:Q4_K_M ")
    assert "--alias gemma-3-12b " in command
    code, out, _ = _plan(capsys, "gemma-3-12b", "--gpu-snapshot", str(WAYLAND), "--json")
    data = json.loads(out)
    assert code == 0 and data["preset"] == "gemma-3-12b"
    assert data["planned_from"] == "preset facts" and "HF_HUB_OFFLINE" in data["offline"]
    assert data["argv"][:3] == ["llama-server", "-hf", "unsloth/gemma-3-12b-it-GGUF:Q4_K_M"]


def test_plan_names_an_unknown_preset_and_the_presets_there_are(capsys) -> None:
    code, out, err = _plan(capsys, "no-such-preset", "--vram", "16GiB")
    assert code == 2 and not out and "Traceback" not in err
    assert "there is no preset named 'no-such-preset'" in err and "gemma-3-12b" in err


@pytest.mark.parametrize(
    ("name", "tag"),
    [
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("gpt-oss-20b-mxfp4.gguf", "MXFP4"),
        ("model-IQ2_XXS-00001-of-00003.gguf", "IQ2_XXS"),
        ("gemma-3-12b-it-BF16.gguf", "BF16"),
        ("smollm2-second.gguf", None),  # was "SECOND"
        ("Llama-3-8B-Instruct.gguf", None),
        ("model.q4.gguf", "Q4"),
        ("Qwen3.gguf", None),
    ],
)
def test_only_a_known_quant_tag_is_a_quant(name: str, tag: str | None) -> None:
    assert quant_tag(name) == tag
    info = split_info(name)
    assert info is not None and info.tag == tag


def test_a_symlink_is_read_by_its_own_name(tmp_path: Path) -> None:
    from homelab.ui.backend import local_ggufs

    target = tmp_path / "blobs" / "weights-second.gguf"
    target.parent.mkdir()
    target.write_bytes(b"GGUF")
    link = tmp_path / "models" / "Smol-Q8_0.gguf"
    link.parent.mkdir()
    link.symlink_to(target)
    (found,) = local_ggufs([link.parent])
    assert found == link and quant_tag(found.name) == "Q8_0"
    link.unlink()
    bare = link.parent / "smol-second.gguf"  # a link with no quant in its name has none
    bare.symlink_to(tmp_path / "blobs" / "x-Q4_0.gguf")
    (found,) = local_ggufs([link.parent])
    assert found == bare and quant_tag(found.name) is None


def test_presets_name_the_tokens_allocated_and_the_tokens_that_fit(
    capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code = main(["presets", "--gpu-snapshot", str(WAYLAND)])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    assert lines[0].endswith(" GiB usable after headroom.")
    header = [cell.strip() for cell in lines[1].split("  ") if cell.strip()]
    # the TUI's verdict says "N slots × T tokens allocated"; `plan` says "N tokens fit"
    assert "SLOTS × TOKENS ALLOCATED" in header and "TOKENS THAT FIT" in header
    assert "TOKENS" not in header and "CONVERSATIONS" not in header
