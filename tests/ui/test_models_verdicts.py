"""The models menu's verdicts: instant and offline from the presets' facts, marked as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.gpu.probe import probe
from homelab.hub.presets import load_presets
from homelab.plan.vocabulary import allocated_words
from homelab.serve.preset_fit import fit_preset_from_facts
from homelab.ui.app import make_app
from homelab.ui.catalog import FROM_PRESET, FROM_PRESET_LEGEND, PRESET_LEGEND
from homelab.ui.widgets.models import ModelsMenu
from tests.ui.helpers import GPU_FIXTURES, run, wait_until

CARD = GPU_FIXTURES / "rtx3090_wayland.json"


def test_offline_the_presets_are_judged_from_their_facts_and_marked(
    models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (models_dir / "broken-Q4_K_M.gguf").write_bytes(b"GGUF not really")
    presets = [p for p in load_presets() if p.engine == "llama.cpp"]
    report = probe(snapshot=CARD, window_s=0)
    expected = {
        f"preset:{p.key}": fit_preset_from_facts(p, report, plan_options()).fit for p in presets
    }

    async def drive() -> None:
        app = make_app(
            gpu_snapshot=CARD, models_dirs=[models_dir], refresh_s=0, blink=False, adopt=False
        )
        async with app.run_test(size=(140, 45)) as pilot:
            menu = app.query_one("#menu", ModelsMenu)
            smollm2 = str(models_dir / "SmolLM2-135M-Instruct.Q4_1.gguf")
            broken = str(models_dir / "broken-Q4_K_M.gguf")
            keys = [*expected, smollm2, broken]
            await wait_until(pilot, lambda: all(k in menu.judgements for k in keys))
            for key, fit in expected.items():
                judged = menu.judgements[key]
                assert judged.from_preset and judged.text.endswith(FROM_PRESET), key
                assert judged.verdict == fit.verdict != "unknown", key
                if fit.verdict == "fits":
                    assert fit.plan is not None
                    assert judged.text.startswith(f"fits: {allocated_words(fit.plan)}"), key
            assert FROM_PRESET_LEGEND in str(menu.border_subtitle)
            assert PRESET_LEGEND in str(menu.border_subtitle)  # what the rows' ★ means
            assert menu.judgements[smollm2].text.startswith("fits: ")
            assert not menu.judgements[smollm2].from_preset
            assert menu.judgements[broken].verdict == "unknown"
            assert menu.judgements[broken].text.startswith("unknown: ")

    run(drive())


def test_a_model_that_does_not_fit_says_short_by_how_much() -> None:
    import dataclasses

    from homelab.hub.preset_facts import QuantSizes, stand_in
    from homelab.plan.judge import judge
    from homelab.ui.catalog import judgement_of_fit

    preset = next(p for p in load_presets() if p.key == "qwen3.5-9b")
    assert preset.facts is not None
    huge = QuantSizes(file_bytes=40 * 1024**3, embedding_bytes=10**9, output_bytes=30 * 1024**3)
    facts = dataclasses.replace(preset.facts, quants={preset.quant: huge})
    report = probe(snapshot=CARD, window_s=0)
    fit = judge(stand_in(facts, preset.quant, "huge"), "huge", report, plan_options())
    assert fit.verdict == "does_not_fit" and fit.short_by is not None and fit.short_by > 0
    judged = judgement_of_fit(fit)
    assert judged.text.startswith("does not fit: short by ") and judged.text.endswith("GiB")


@pytest.mark.parametrize(
    ("tokens", "words"),
    [
        (9_999, "9,999"),
        (262_144, "262k"),
        (999_999, "999k"),
        (1_701_632, "1.7M"),
        (12_000_000, "12.0M"),
    ],
)
def test_a_compact_count_rounds_down_and_reads_in_millions_past_a_million(
    tokens: int, words: str
) -> None:
    from homelab.ui.catalog import _thousands

    assert _thousands(tokens) == words
