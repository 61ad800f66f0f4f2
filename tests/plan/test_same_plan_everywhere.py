"""The same plan everywhere: every fixture model on every recorded card, planned through
``homelab plan --json`` (the real CLI entry), ``homelab serve --dry-run`` and the TUI's
preview (:func:`homelab.ui.backend.prepare`, what the models screen calls), gives one plan:
the same working, figures and command line, or the same refusal.

Beside the defaults: an engine memory limit (the prompt cache sized under it, in the
working and as ``--cache-ram``), a split over two recorded cards, a synthetic card, and
vLLM's fixture models (plan and dry-run; the TUI plans llama.cpp only).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from homelab.cli import build_parser, main
from homelab.cli.plan_cmd import options_from_args
from homelab.errors import HomelabError
from homelab.plan.card import card_for
from homelab.plan.serialize import plan_to_dict
from homelab.ui import backend
from homelab.units import GiB
from tests.engine.vllm.vllm_fixture_data import CONFIGS, write_shards
from tests.factory import ARCHS, write_gguf

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
CARDS = sorted(path.stem for path in GPU.glob("*.json"))
SPLIT_CARDS = ("two_gpus", "constructed_two_equal", "constructed_mixed_24_12_display_small")
VLLM_MODELS = ("homelab__tiny-llama", "Qwen__Qwen3-8B", "openai__gpt-oss-20b")


@pytest.fixture(autouse=True)
def _fixed_ram(monkeypatch: pytest.MonkeyPatch) -> None:
    """System RAM held still (16 GiB, 12 GiB available): a card-less plan reads it live,
    and the three front-ends must see one machine."""
    from homelab.gpu import cpu
    from homelab.gpu.report import CpuMemory

    monkeypatch.setattr(cpu, "cpu_memory", lambda: CpuMemory(total=16 * GiB, available=12 * GiB))


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, smollm2_gguf: Path) -> list[Path]:
    """Every factory architecture's tiny GGUF, and the real SmolLM2."""
    folder = tmp_path_factory.mktemp("models")
    return [smollm2_gguf, *(write_gguf(arch, folder / f"{arch}.gguf") for arch in ARCHS)]


def _cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, object]:
    """(exit code, the JSON printed, else what was said on stderr) of ``homelab ARGV``."""
    code = main(argv)
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else err


def _tui(model: Path, options: list[str]) -> tuple[int, object]:
    """(exit code, the plan as ``--json`` words it, else the refusal) of the TUI's preview
    for the same model and options."""
    args = build_parser().parse_args(["plan", str(model), *options])
    try:
        plan_options = options_from_args(args)
        prepared = backend.prepare(str(model), card_for(plan_options), plan_options)
    except HomelabError as error:
        return int(error.exit_code), error.message
    plan = prepared.plan.plan
    code = 0 if plan.verdict == "fits" else 3
    return code, plan_to_dict(plan, list(prepared.argv))


def _same_everywhere(
    capsys: pytest.CaptureFixture[str], model: Path, options: list[str], *, tui: bool = True
) -> object:
    """The plan of ``model`` with ``options``, asserted identical through every front-end."""
    planned = _cli(capsys, ["plan", str(model), *options, "--json"])
    dry_run = _cli(capsys, ["serve", str(model), *options, "--dry-run"])
    assert dry_run == planned, f"serve --dry-run differs from plan --json for {model.name}"
    if tui:
        code, shown = _tui(model, options)
        if planned[0] in (0, 3):
            assert (code, shown) == planned, f"the TUI's preview differs for {model.name}"
        else:  # a refusal: the same one, said the same way
            assert code == planned[0] and isinstance(shown, str) and shown in str(planned[1])
    return planned[1]


@pytest.mark.parametrize("card", CARDS)
def test_every_model_plans_the_same_on_every_card(
    capsys: pytest.CaptureFixture[str], models: list[Path], card: str
) -> None:
    snapshot = ["--gpu-snapshot", str(GPU / f"{card}.json"), "--sample-seconds", "0"]
    for model in models:
        _same_everywhere(capsys, model, snapshot)


@pytest.mark.parametrize("card", SPLIT_CARDS)
def test_a_split_over_two_cards_is_the_same_plan(
    capsys: pytest.CaptureFixture[str], models: list[Path], card: str
) -> None:
    options = ["--gpu-snapshot", str(GPU / f"{card}.json"), "--gpu", "0,1", "--workload", "agent"]
    for model in models:
        data = _same_everywhere(capsys, model, options)
        if isinstance(data, dict) and len(data["devices"]) == 2:
            assert "--tensor-split" in data["argv"]


@pytest.mark.parametrize("limit", ["1GiB", "4GiB", "64GiB"])
def test_an_engine_memory_limit_sizes_the_prompt_cache_everywhere(
    capsys: pytest.CaptureFixture[str], models: list[Path], limit: str
) -> None:
    options = ["--gpu-snapshot", str(GPU / "no_gpu.json"), "--engine-memory-limit", limit]
    sized = 0
    for model in models:
        data = _same_everywhere(capsys, model, options)
        if isinstance(data, dict):
            sized += 1
            assert "--cache-ram" in data["argv"]
            assert any("--cache-ram" in line for line in data["steps"])
    assert sized, "no model planned under the limit: the case tests nothing"


def test_a_synthetic_card_and_asked_settings_are_the_same_plan(
    capsys: pytest.CaptureFixture[str], models: list[Path]
) -> None:
    options = ["--vram", "12GiB", "--ctx", "8192", "--parallel", "2", "--cache-type", "f16"]
    for model in models:
        _same_everywhere(capsys, model, [*options, "--port", "9090"])


@pytest.mark.parametrize("name", VLLM_MODELS)
def test_vllm_plans_the_same_in_plan_and_dry_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(CONFIGS / name / "config.json", folder / "config.json")
    spec = json.loads((CONFIGS / name / "weights.json").read_text())
    write_shards(folder, int(spec["total_bytes"]), int(spec["shards"]))
    for card in ("rtx3090_headless", "two_gpus", "no_gpu"):
        options = ["--engine", "vllm", "--gpu-snapshot", str(GPU / f"{card}.json")]
        data = _same_everywhere(capsys, folder, options, tui=False)
        if isinstance(data, dict):
            assert data["engine"] == "vllm" and data["argv"]
