"""``homelab plan --models [FILE]`` and ``homelab plan A B C`` end to end: the working, the
JSON (bytes, unknown null), exit codes, a models list from the config folder."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.cli.plan_set_cmd import set_data
from homelab.engine.options import plan_options
from homelab.gpu.probe import probe
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.budget import device_budget
from homelab.plan.models_file import ModelEntry
from homelab.plan.workload import CHAT
from homelab.serve.model_set import plan_set
from homelab.units import GiB
from tests.plan.set_models import write_all

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"
RTX3090 = str(FIXTURES / "rtx3090_headless.json")
CARD = ["--gpu-snapshot", RTX3090, "--sample-seconds", "0"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("set-cli"))


def _list(path: Path, models: dict[str, Path]) -> Path:
    path.write_text(
        f"""
[[model]]
model = "{models["coder-8b"]}"
workload = "agent"
id = "coder"
aliases = ["claude-sonnet-*"]

[[model]]
model = "{models["fim-1b"]}"
workload = "fim"
aliases = ["claude-haiku-*"]

[[model]]
model = "{models["chat-14b"]}"
workload = "chat"
slots = 2

[[model]]
model = "{models["big-70b"]}"
workload = "chat"
"""
    )
    return path


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_models_list_json_shape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, models: dict[str, Path]
) -> None:
    listed = str(_list(tmp_path / "m.toml", models))
    code, out, err = _plan(capsys, "--models", listed, "--json", *CARD)
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"devices", "models", "resident", "swaps", "does_not_fit"}
    (card,) = data["devices"]
    budget = device_budget(probe(snapshot=Path(RTX3090), window_s=0))
    assert (
        card["usable"]
        == budget.usable
        == (card["total"] - card["reserved"] - card["desktop"] - card["other"] - card["headroom"])
    )
    assert card["device"] == "CUDA0" and card["kind"] == "gpu"
    ids = [m["id"] for m in data["models"]]
    assert ids == ["coder", "fim-1b-Q4_K_M", "chat-14b-Q4_K_M", "big-70b-Q4_K_M"]
    assert data["resident"] == ids[:2] and data["swaps"] == [ids[2]]
    assert data["does_not_fit"] == [ids[3]]
    assert card["resident"] == sum(m["bytes"] for m in data["models"][:2])
    assert card["left"] == card["usable"] - card["resident"]
    coder, fim, chat, big = data["models"]
    assert coder["aliases"] == ["claude-sonnet-*"] and fim["aliases"] == ["claude-haiku-*"]
    assert (fim["workload"], fim["slots"], fim["ctx_per_slot"]) == ("fim", 2, 4096)
    assert (chat["status"], chat["verdict"], chat["evicts"]) == ("swaps", "fits", [ids[1]])
    assert (big["status"], big["verdict"]) == ("does_not_fit", "partial")
    for model in data["models"]:
        (device,) = model["devices"]
        parts = ("weights", "kv", "compute", "cuda_context")
        assert all(isinstance(device[p], int) for p in parts)
        assert device["total"] == sum(device[p] for p in parts) == model["bytes"]
        assert model["problem"] is None
    assert "--alias" in coder["argv"] and coder["argv"][coder["argv"].index("--alias") + 1]


def test_a_model_with_no_plan_has_null_bytes_not_zero(models: dict[str, Path]) -> None:
    ram = CpuMemory(total=64 * GiB, available=40 * GiB)  # the 70B's 40 GiB do not fit there
    report = replace(synthetic_report(GiB), devices=(), cpu=ram)
    entries = [ModelEntry(str(models[k]), CHAT) for k in ("fim-1b", "big-70b")]
    data = json.loads(json.dumps(set_data(plan_set(entries, plan_options(), report=report))))
    fim, big = data["models"]
    assert fim["status"] == "resident" and fim["bytes"] > 0
    assert (big["status"], big["verdict"]) == ("does_not_fit", "does_not_fit")
    assert big["bytes"] is None and big["ctx_per_slot"] is None and big["devices"] == []
    assert big["problem"] and big["argv"] == []
    assert data["devices"][0]["device"] == "CPU" and data["devices"][0]["kind"] == "cpu"


def test_human_output_shows_each_model_the_sum_and_the_swaps(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, models: dict[str, Path]
) -> None:
    code, out, _ = _plan(capsys, "--models", str(_list(tmp_path / "m.toml", models)), *CARD)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("GPU 0: NVIDIA GeForce RTX 3090 (CUDA0): 24.00 GiB − reserved")
    assert "counted once for the set" in lines[0]
    assert "1. coder (agent, 1 × 100,096 tokens): fits alone" in lines
    assert "2. fim-1b-Q4_K_M (fim, 2 × 4,096 tokens): fits alone" in lines
    assert any(line.startswith("   weights ") and "on CUDA0" in line for line in lines)
    assert any(line.startswith("Resident on CUDA0: coder + fim-1b-Q4_K_M = ") for line in lines)
    assert any(
        line.startswith("Swaps: chat-14b-Q4_K_M: needs ")
        and line.endswith("loading it unloads fim-1b-Q4_K_M")
        for line in lines
    )
    assert any(line.startswith("Does not fit: big-70b-Q4_K_M: ") for line in lines)


def test_several_models_on_the_command_line(
    capsys: pytest.CaptureFixture[str], models: dict[str, Path]
) -> None:
    code, out, _ = _plan(
        capsys, str(models["fim-1b"]), str(models["coder-8b"]), "--workload", "chat", *CARD
    )
    assert code == 0
    assert "1. fim-1b-Q4_K_M (chat, 1 × 8,192 tokens): fits alone" in out
    assert "2. coder-8b-Q4_K_M (chat, 1 × 8,192 tokens): fits alone" in out


def test_exit_3_when_the_most_wanted_does_not_fit(
    capsys: pytest.CaptureFixture[str], models: dict[str, Path]
) -> None:
    code, out, _ = _plan(capsys, str(models["big-70b"]), str(models["fim-1b"]), *CARD)
    assert code == 3
    assert "Resident on CUDA0: fim-1b-Q4_K_M = " in out


def test_the_default_list_is_read_from_the_config_folder(
    capsys: pytest.CaptureFixture[str], models: dict[str, Path]
) -> None:
    config = Path(os.environ["HOMELAB_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    _list(config / "models.toml", models)
    code, out, _ = _plan(capsys, "--models", "--json", *CARD)
    assert code == 0 and json.loads(out)["resident"][0] == "coder"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--models", "M", "--ctx", "8192"], "--ctx and --parallel are one model's"),
        (["--models", "M", "--workload", "chat"], "--workload and --for are not taken"),
        (["--models", "M", "X.gguf"], "give a models list (--models) or models, not both"),
        (["--models", "NOPE"], "cannot be read"),
        ([], "plan what?"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    models: dict[str, Path],
    args: list[str],
    says: str,
) -> None:
    listed = str(_list(tmp_path / "m.toml", models))
    words = [
        listed if a == "M" else str(tmp_path / a) if a in ("NOPE", "X.gguf") else a for a in args
    ]
    code, _, err = _plan(capsys, *words, *CARD)
    assert code == 2, err
    assert says in err and "Traceback" not in err


def test_a_hostile_list_names_the_file_and_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "models.toml"
    bad.write_text("[[model]]\nmodel = 'a.gguf'\nworkload = 'chat'\ncolour = 'red'\n")
    code, _, err = _plan(capsys, "--models", str(bad), *CARD)
    assert code == 2
    assert f"{bad}: model 1: unknown key 'colour'" in err


def test_an_unreadable_model_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    foreign = tmp_path / "photo.gguf"
    foreign.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    code, _, err = _plan(capsys, str(foreign), str(foreign), *CARD)
    assert code == 4
    assert str(foreign) in err and "Traceback" not in err


def test_a_preset_in_the_set_keeps_its_name_and_workload(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, models: dict[str, Path]
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # planned from the preset's facts
    code, out, err = _plan(capsys, "qwen3-8b", str(models["fim-1b"]), "--json", *CARD)
    assert code == 0, err
    preset, fim = json.loads(out)["models"]
    assert (preset["id"], preset["workload"], preset["status"]) == ("qwen3-8b", "chat", "resident")
    assert "HF_HUB_OFFLINE" in preset["offline"] and fim["offline"] is None
    assert preset["argv"][:2] == ["llama-server", "-hf"]
