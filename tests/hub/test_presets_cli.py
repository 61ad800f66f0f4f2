"""``homelab presets``: verdicts on a replayed card, with the presets' repos on the local Hub
stand-in, agree with ``homelab plan`` on the same files; offline without headers is
"unknown", offline with cached headers is the same list as online."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from homelab.cli import main
from homelab.errors import ExitCode
from homelab.gguf.model_file import read_model
from homelab.hub.presets import Preset, load_presets, user_presets_dir
from tests.factory import write_gguf
from tests.hubstub import HubStub

REPO_ROOT = Path(__file__).resolve().parents[2]
CARD = REPO_ROOT / "tests" / "fixtures" / "gpu" / "rtx4060ti16_xorg.json"
"""A 16 GB RTX 4060 Ti under Xorg: 12.8 GiB usable once the desktop and headroom are off."""
CARD_TOTAL = 17_175_674_880

FACTORY_ARCH = {
    arch: arch
    for arch in (
        "qwen35",
        "qwen35moe",
        "qwen3",
        "gpt-oss",
        "gemma3",
        "llama",
        "granitehybrid",
        "nemotron_h",
        "deepseek2",
        "lfm2moe",
        "qwen3moe",
    )
}
"""Shipped presets' archs the test factory can write; the others are left off the stand-in Hub."""

USER_PRESET = """\
name = "{name}"
repo = "tester/{name}-GGUF"
quant = "Q4_K_M"
engine = "llama.cpp"
workload = "agent"
notes = "Written by a test: {why}."
license = "mit"
arch = "llama"
"""


def served_name(preset: Preset) -> str:
    """``Qwen3.5-9B-Q4_K_M.gguf`` for ``unsloth/Qwen3.5-9B-GGUF:Q4_K_M``: the quant in the name."""
    stem = preset.repo.split("/", 1)[1].removesuffix("-GGUF")
    return f"{stem}-{preset.quant}.gguf"


def header_only(src: Path, dst: Path, grow: Callable[[str], int]) -> Path:
    """A copy of ``src``'s header whose tensors claim ``grow(name)`` times their rows, and no data.

    Homelab (like llama.cpp's loader) sizes weights from the header's tensor infos, so a
    few-KB file can describe a model bigger than the card.
    """
    reader = gguf.GGUFReader(src)
    writer = gguf.GGUFWriter(str(dst), str(reader.fields["general.architecture"].contents()))
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, field.contents())
        else:
            writer.add_key_value(name, field.contents(), field.types[0])
    for tensor in reader.tensors:
        ne = [int(d) for d in tensor.shape]
        ne[-1] *= grow(tensor.name)
        kind = gguf.GGMLQuantizationType(tensor.tensor_type)
        dtype = {
            gguf.GGMLQuantizationType.F16: np.float16,
            gguf.GGMLQuantizationType.F32: np.float32,
        }[kind]
        n_bytes = int(np.prod(ne)) * np.dtype(dtype).itemsize
        writer.add_tensor_info(tensor.name, list(reversed(ne)), dtype, n_bytes, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return dst


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str, Path]]:
    """key -> (repo, filename, local file) for every preset the stand-in Hub serves.

    Shipped presets get a tiny GGUF of their architecture's real attention geometry. Two
    user presets get header-only files: ``spill`` (16 GiB of blocks: partial offload) and
    ``huge`` (a 20 GiB output layer: does not fit at all).
    """
    folder = tmp_path_factory.mktemp("preset-ggufs")
    out: dict[str, tuple[str, str, Path]] = {}
    for preset in load_presets(user_dir=None):
        if preset.arch in FACTORY_ARCH:
            path = write_gguf(FACTORY_ARCH[preset.arch], folder / served_name(preset))
            out[preset.key] = (preset.repo, path.name, path)
    base = write_gguf("llama", folder / "base.gguf")
    spill = header_only(
        base, folder / "Spill-Q4_K_M.gguf", lambda n: 131_072 if "ffn_down" in n else 1
    )
    huge = header_only(
        base, folder / "Huge-Q4_K_M.gguf", lambda n: 1_100_000 if n == "output.weight" else 1
    )
    out["spill"] = ("tester/Spill-GGUF", spill.name, spill)
    out["huge"] = ("tester/Huge-GGUF", huge.name, huge)
    return out


def _user_presets() -> None:
    folder = user_presets_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spill.toml").write_text(
        USER_PRESET.format(name="Spill", why="weights bigger than the card")
    )
    (folder / "huge.toml").write_text(
        USER_PRESET.format(name="Huge", why="an output layer bigger than the card")
    )


def _start_hub(
    hub_stub: Callable[..., HubStub], served: dict[str, tuple[str, str, Path]]
) -> HubStub:
    repos: dict[str, dict[str, bytes | Path]] = {}
    for repo, filename, path in served.values():
        repos.setdefault(repo, {})[filename] = path
    return hub_stub(repos)


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def _presets_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, dict[str, Any]]:
    code, out, err = _run_json(capsys, "presets", "--json", "--gpu-snapshot", str(CARD), *extra)
    assert code == ExitCode.OK, err
    return {entry["key"]: entry for entry in out["presets"]}


COMPARED = (
    "verdict",
    "tokens_fit",
    "parallel",
    "ctx_per_slot",
    "ctx_size",
    "weights_bytes",
    "kv_bytes_per_token",
    "n_gpu_layers",
)


def test_presets_json_agrees_with_plan_on_the_same_files(
    hub_stub: Callable[..., HubStub],
    served: dict[str, tuple[str, str, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _start_hub(hub_stub, served)
    _user_presets()
    listed = _presets_json(capsys)

    assert set(listed) == {p.key for p in load_presets()}
    for key, (_repo, _name, path) in served.items():
        entry = listed[key]
        workload = entry["workload"]["name"]
        if workload not in ("agent", "chat"):
            workload = str(entry["workload"]["tokens_per_slot"])
        code, plan, err = _run_json(
            capsys, "plan", str(path), "--json", "--gpu-snapshot", str(CARD), "--workload", workload
        )
        if entry["verdict"] == "does_not_fit":
            assert code == ExitCode.DOES_NOT_FIT and plan is None, key
            assert "Does not fit" in err and "Does not fit" in entry["reason"], key
            assert entry["weights_bytes"] == read_model(path).weights_bytes > CARD_TOTAL, key
            continue
        assert plan is not None, f"{key}: plan failed: {err}"
        mine = {name: entry[name] for name in COMPARED}
        theirs = {
            "verdict": plan["verdict"],
            "tokens_fit": plan["tokens_fit"],
            "parallel": plan["parallel"],
            "ctx_per_slot": plan["ctx_per_slot"],
            "ctx_size": plan["ctx_size"],
            "weights_bytes": plan["weights_bytes"],
            "kv_bytes_per_token": plan["kv_bytes_per_token"],
            "n_gpu_layers": plan["n_gpu_layers"],
        }
        assert mine == theirs, key
        assert entry["file_bytes"] == path.stat().st_size

    verdicts = {key: listed[key]["verdict"] for key in served}
    assert verdicts["huge"] == "does_not_fit"
    assert verdicts["spill"] == "partial"
    assert "fits" in verdicts.values()
    for key, entry in listed.items():
        if key not in served:  # an arch the factory cannot write: not on the stand-in Hub
            assert entry["verdict"] == "unknown" and "not" in entry["reason"].lower(), key
            assert entry["tokens_fit"] is None and entry["weights_bytes"] is None


def test_workload_option_applies_to_every_preset(
    hub_stub: Callable[..., HubStub],
    served: dict[str, tuple[str, str, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _start_hub(hub_stub, served)
    hinted = _presets_json(capsys)
    chat = _presets_json(capsys, "--workload", "chat")
    assert {e["workload"]["name"] for e in chat.values()} == {"chat"}
    assert {e["workload"]["name"] for e in hinted.values()} == {"agent", "chat"}
    gpt = hinted["gpt-oss-20b"], chat["gpt-oss-20b"]
    assert gpt[0]["workload"]["name"] == "agent" and gpt[0]["ctx_per_slot"] > gpt[1]["ctx_per_slot"]


def test_offline_without_headers_plans_from_the_preset_facts_or_says_unknown(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _user_presets()  # spill and huge: new presets without [facts]
    listed = _presets_json(capsys)
    shipped = {p.key for p in load_presets(user_dir=None)}
    assert shipped and set(listed) == shipped | {"spill", "huge"}
    for key in shipped:
        entry = listed[key]
        assert entry["verdict"] != "unknown" and entry["verdict_from"] == "preset", key
        assert entry["kv_bytes_per_token"] and entry["weights_bytes"], key
        assert any(
            w.startswith("planned from the preset's facts: Offline") for w in entry["warnings"]
        )
    for key in ("spill", "huge"):
        entry = listed[key]
        assert entry["verdict"] == "unknown" and entry["verdict_from"] is None
        assert entry["problem"] == "Offline" and "HF_HUB_OFFLINE" in entry["reason"]
        assert entry["tokens_fit"] is None and entry["parallel"] is None

    code = main(["presets", "--gpu-snapshot", str(CARD)])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0].startswith("On GPU 0: NVIDIA GeForce RTX 4060 Ti")
    rows = {line.split()[0].rstrip("*"): line for line in lines[2 : 2 + len(listed)]}
    assert all(" unknown " in rows[key] for key in ("spill", "huge"))
    assert not any(" unknown " in rows[key] for key in shipped)
    offline = [line for line in lines if line.startswith("! Offline")]
    assert len(offline) == 1 and all(key in offline[0] for key in ("spill", "huge"))
    facts = [line for line in lines if line.startswith("! From the preset's own facts")]
    assert len(facts) == 1 and all(key in facts[0] for key in shipped)
    assert "Traceback" not in out


def test_headers_read_once_serve_the_list_offline(
    hub_stub: Callable[..., HubStub],
    served: dict[str, tuple[str, str, Path]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stub = _start_hub(hub_stub, served)
    _user_presets()
    online = _presets_json(capsys)
    stub.close()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = _presets_json(capsys)
    for key in served:
        assert online[key]["verdict_from"] == offline[key]["verdict_from"] == "header", key
        assert {n: offline[key][n] for n in COMPARED} == {n: online[key][n] for n in COMPARED}, key


def test_human_table_shows_verdicts_and_marks_user_presets(
    hub_stub: Callable[..., HubStub],
    served: dict[str, tuple[str, str, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _start_hub(hub_stub, served)
    _user_presets()
    code = main(["presets", "--gpu-snapshot", str(CARD)])
    out = capsys.readouterr().out
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0].startswith("On GPU 0: NVIDIA GeForce RTX 4060 Ti")
    rows = {
        line.split()[0]: line for line in lines[2:] if line and not line.startswith(("!", "Your"))
    }
    assert "does not fit" in rows["huge*"] and "partial" in rows["spill*"]
    assert " fits " in rows["qwen3.5-9b"] and "100,096" in rows["qwen3.5-9b"]
    assert "unknown" not in rows["lfm2-8b-a1b"]  # every shipped preset's arch is served now
    assert any(line.startswith("! huge:") for line in lines)


def test_a_user_override_changes_what_is_planned(
    hub_stub: Callable[..., HubStub],
    served: dict[str, tuple[str, str, Path]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    _start_hub(hub_stub, served)
    folder = user_presets_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gpt-oss-20b.toml").write_text('workload = "chat"\n')
    (folder / "qwen3.5-9b.toml").write_text('quant = "Q8_0"\n')
    listed = _presets_json(capsys)

    gpt = listed["gpt-oss-20b"]
    assert (gpt["origin"], gpt["workload"]["name"], gpt["verdict"]) == ("user", "chat", "fits")
    assert gpt["overrides"].endswith("presets/gpt-oss-20b.toml") and gpt["ctx_per_slot"] == 8192
    qwen = listed["qwen3.5-9b"]
    assert (qwen["ref"], qwen["verdict"], qwen["problem"]) == (
        "unsloth/Qwen3.5-9B-GGUF:Q8_0",
        "unknown",
        "Quant not found",
    )
    assert "Q4_K_M" in qwen["reason"]  # the quants the repo does have
