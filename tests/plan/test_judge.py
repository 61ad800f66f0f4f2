"""homelab.plan.judge: one verdict for a model on a card, each kind, on generated GGUFs.

The judge's plan must be the plan ``plan_model`` makes for the same options (the one
planning path), and its figures must be that plan's; the failures keep the error's
title, message and hint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.errors import ModelFileError
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import synthetic_report
from homelab.plan.budget import HEADROOM_HEADLESS
from homelab.plan.judge import Fit, judge
from homelab.plan.pipeline import plan_model
from homelab.plan.workload import CHAT, parse_workload
from homelab.units import GiB, MiB
from tests.factory import write_gguf

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"


@pytest.fixture
def llama(tmp_path: Path) -> Path:
    # wide enough that each block is a few MB: a card can be cut between blocks
    return write_gguf("llama", tmp_path / "llama.gguf", n_embd=512, n_ff=2048, n_layer=8)


def _check_figures(fit: Fit, path: Path) -> None:
    plan = fit.plan
    assert plan is not None
    alloc = plan.candidate.allocation
    assert fit.tokens_fit == plan.tokens_fit > 0
    assert fit.slots == plan.settings.n_seq >= 1
    assert fit.ctx_per_slot == alloc.ctx_per_slot
    assert fit.kv_bytes_per_token == alloc.bytes_per_token > 0
    assert fit.weights_bytes == plan.weights.total == read_model(path).weights_bytes
    assert fit.file_bytes == path.stat().st_size
    assert fit.reason is None and fit.problem is None and fit.explanation is None


def test_fits_on_a_replayed_card_is_the_plan_models_plan(llama: Path) -> None:
    model = read_model(llama)
    report = probe(snapshot=GPU / "rtx3090_wayland.json", window_s=0)
    options = plan_options(workload=CHAT)
    fit = judge(model, "llama", report, options)
    assert fit.verdict == "fits" and fit.workload == CHAT
    assert fit.plan == plan_model(model, "llama", report, options)
    _check_figures(fit, llama)
    assert fit.wanted_per_slot == CHAT.tokens_per_slot
    assert fit.full_slots == fit.slots  # every slot holds a whole chat


def test_a_default_workload_applies_only_when_none_was_asked(llama: Path) -> None:
    model = read_model(llama)
    report = synthetic_report(16 * GiB)
    hinted = judge(model, "m", report, plan_options(), default_workload=CHAT)
    assert hinted.workload == CHAT and hinted.plan.request.workload == CHAT
    asked = parse_workload("16384")
    forced = judge(model, "m", report, plan_options(workload=asked), default_workload=CHAT)
    assert forced.workload == asked and forced.ctx_per_slot >= asked.tokens_per_slot


def test_partial_when_the_weights_do_not_fit_the_card(llama: Path) -> None:
    model = read_model(llama)
    options = plan_options(ctx=4096, slots=1)
    whole = judge(model, "m", synthetic_report(16 * GiB), options).plan
    assert whole is not None and whole.verdict == "fits"
    # the card the whole plan needs, less half a block: one block must go to the CPU
    need = HEADROOM_HEADLESS + whole.weights_on_device + whole.candidate.cost
    card = need - max(whole.weights.per_block) // 2
    fit = judge(model, "m", synthetic_report(card), options)
    assert fit.verdict == "partial"
    _check_figures(fit, llama)
    assert fit.plan.n_gpu_layers == len(whole.weights.per_block)  # output + all blocks but one


def test_does_not_fit_keeps_the_errors_numbers(llama: Path) -> None:
    model = read_model(llama)
    fit = judge(model, "m", synthetic_report(HEADROOM_HEADLESS + 64 * MiB), plan_options())
    assert fit.verdict == "does_not_fit" and fit.plan is None
    assert fit.problem == "Does not fit" and "64.00 MiB usable" in (fit.reason or "")
    assert fit.explanation.startswith(f"Does not fit: {fit.reason}")
    assert fit.weights_bytes == model.weights_bytes  # the header was read: sizes known
    assert fit.tokens_fit is None and fit.slots is None and fit.kv_bytes_per_token is None
    assert fit.full_slots == 0 and fit.wanted_per_slot is None


def test_unknown_without_a_header(tmp_path: Path) -> None:
    foreign = tmp_path / "not.gguf"
    foreign.write_bytes(b"PK\x03\x04 not a gguf at all")
    with pytest.raises(ModelFileError) as caught:
        read_model(foreign)
    fit = judge(caught.value, "not.gguf", synthetic_report(16 * GiB), plan_options())
    assert fit.verdict == "unknown" and fit.plan is None
    assert fit.problem == caught.value.title and fit.reason == caught.value.message
    assert fit.hint == caught.value.hint
    assert fit.weights_bytes is None and fit.file_bytes is None


def test_unknown_when_the_options_cannot_be_planned_for_this_model(tmp_path: Path) -> None:
    mla = read_model(write_gguf("deepseek2", tmp_path / "mla.gguf"))
    options = plan_options(cache_type_k="f16", cache_type_v="q8_0")
    fit = judge(mla, "mla", synthetic_report(16 * GiB), options)
    assert fit.verdict == "unknown" and fit.problem == "Invalid usage"
    assert "MLA" in (fit.reason or "") and "--" not in (fit.hint or "")  # names the setting
    assert fit.weights_bytes == mla.weights_bytes
