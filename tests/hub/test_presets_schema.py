"""Presets: the shipped files validate, broken files are named with their field, user files
override or extend the shipped ones, and an installed wheel carries the presets."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.errors import ExitCode
from homelab.gguf.archs import known_architectures
from homelab.hub.preset_fields import ENGINES, REQUIRED, PresetError
from homelab.hub.presets import (
    UnknownPresetError,
    find_preset,
    load_preset_file,
    load_presets,
    shipped_presets_dir,
    user_presets_dir,
)
from homelab.plan.workload import AGENT, CHAT

REPO_ROOT = Path(__file__).resolve().parents[2]

VALID = """\
name = "Tiny test model"
repo = "tester/Tiny-GGUF"
quant = "Q4_K_M"
alt_quants = ["Q8_0"]
engine = "llama.cpp"
workload = "chat"
notes = "A preset written by a test."
license = "mit"
arch = "llama"
"""


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def _without(text: str, field: str) -> str:
    return "".join(
        line for line in text.splitlines(keepends=True) if not line.startswith(f"{field} =")
    )


def _with(text: str, field: str, value: str) -> str:
    return _without(text, field) + f"{field} = {value}\n"


# -- the shipped presets -------------------------------------------------------------------


def test_shipped_presets_are_found_in_the_checkout() -> None:
    assert shipped_presets_dir() == REPO_ROOT / "presets"


def test_every_shipped_preset_validates_and_names_a_known_architecture() -> None:
    files = sorted((REPO_ROOT / "presets").glob("*.toml"))
    assert 10 <= len(files) <= 15
    presets = load_presets(user_dir=None)
    assert [p.key for p in presets] == [f.stem for f in files]
    known = set(known_architectures())
    for preset in presets:
        assert preset.origin == "shipped" and preset.overrides is None
        assert preset.arch in known, (
            f"{preset.key}: {preset.arch!r} is not an architecture homelab sizes"
        )
        assert preset.engine in ENGINES
        assert preset.workload in (AGENT, CHAT)
        assert preset.quant not in preset.alt_quants
        assert "/" in preset.repo and preset.ref == f"{preset.repo}:{preset.quant}"


def test_shipped_presets_cover_the_sizes_the_issue_asks_for() -> None:
    archs = {p.arch for p in load_presets(user_dir=None)}
    # small dense, a 30B-class A3B MoE, gpt-oss-20b, gemma 3 12B, a 24B, a hybrid
    assert {"qwen3", "qwen35moe", "gpt-oss", "gemma3", "llama", "qwen35"} <= archs
    keys = {p.key for p in load_presets(user_dir=None)}
    assert {"gpt-oss-20b", "gemma-3-12b", "mistral-small-3.2-24b"} <= keys


def test_wheel_ships_the_presets_inside_the_package() -> None:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    force = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert force["presets"] == "homelab/_presets"


def test_packaged_presets_win_over_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import homelab.hub.presets as presets_module

    packaged = tmp_path / "_presets"
    _write(packaged, "only-packaged", VALID)
    monkeypatch.setattr(presets_module, "_PACKAGED", packaged)
    assert shipped_presets_dir() == packaged
    assert [p.key for p in load_presets(user_dir=None)] == ["only-packaged"]


# -- schema errors name the file and the field ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (_without(VALID, "repo"), "repo", "missing field"),
        (_without(VALID, "license"), "license", "missing field"),
        (_with(VALID, "quant", "4"), "quant", "must be a string, not a number"),
        (_with(VALID, "alt_quants", '"Q8_0"'), "alt_quants", "must be a list"),
        (_with(VALID, "alt_quants", '["Q8_0", 3]'), "alt_quants[1]", "must be a string"),
        (_with(VALID, "engine", '"ollama"'), "engine", "'ollama' is not an engine"),
        (_with(VALID, "engine", "true"), "engine", "must be a string, not a boolean"),
        (_with(VALID, "workload", '"marathon"'), "workload", "'marathon' is not a workload"),
        (_with(VALID, "workload", "12"), "workload", "below the 256-token minimum"),
        (_with(VALID, "workload", "1.5"), "workload", "must be a string or a whole number"),
        (_with(VALID, "repo", '"just-a-name"'), "repo", "is not a Hugging Face repo id"),
        (
            _with(VALID, "arch", '"transformer9000"'),
            "arch",
            "is not an architecture homelab can size",
        ),
        (_with(VALID, "mmproj", '"projector.bin"'), "mmproj", "is not a .gguf file name"),
        (_with(VALID, "name", '"   "'), "name", "is empty"),
        (_with(VALID, "notes", '"' + "x" * 700 + '"'), "notes", "keep it under"),
        (VALID + 'quants = ["Q8_0"]\n', "quants", "unknown field"),
    ],
)
def test_schema_errors_name_the_file_and_the_field(
    tmp_path: Path, text: str, field: str, words: str
) -> None:
    path = _write(tmp_path, "broken", text)
    with pytest.raises(PresetError) as caught:
        load_preset_file(path, origin="user")
    message = caught.value.message
    assert str(path) in message
    assert f"'{field}'" in message
    assert words in message
    assert caught.value.exit_code == ExitCode.USAGE


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "typo", VALID + "notes = \n")
    with pytest.raises(PresetError) as caught:
        load_preset_file(path, origin="user")
    assert str(path) in caught.value.message and "line" in caught.value.message


def test_file_name_must_be_a_usable_preset_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "My Model", VALID)
    with pytest.raises(PresetError, match="not a usable preset name"):
        load_preset_file(path, origin="user")


def test_a_broken_user_preset_fails_the_cli_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(user_presets_dir(), "mine", _with(VALID, "engine", '"ollama"'))
    code = main(["presets", "--vram", "16GiB"])
    err = capsys.readouterr().err
    assert code == ExitCode.USAGE
    assert str(path) in err and "'engine'" in err and "llama.cpp, vllm" in err
    assert "Traceback" not in err


# -- user presets --------------------------------------------------------------------------


def test_user_preset_overrides_a_shipped_one_field_by_field() -> None:
    shipped = {p.key: p for p in load_presets(user_dir=None)}["qwen3.5-9b"]
    path = _write(user_presets_dir(), "qwen3.5-9b", 'quant = "Q8_0"\nworkload = 65536\n')
    merged = {p.key: p for p in load_presets()}["qwen3.5-9b"]
    assert merged.origin == "user" and merged.source == path
    assert merged.overrides == shipped.source
    assert merged.quant == "Q8_0" and merged.workload.tokens_per_slot == 65536
    assert (merged.repo, merged.name, merged.license, merged.arch) == (
        shipped.repo,
        shipped.name,
        shipped.license,
        shipped.arch,
    )


def test_user_preset_adds_a_new_one() -> None:
    _write(user_presets_dir(), "tiny", VALID)
    presets = load_presets()
    keys = [p.key for p in presets]
    assert "tiny" in keys and keys == sorted(keys)
    assert len(presets) == len(load_presets(user_dir=None)) + 1
    tiny = find_preset("TINY", presets)
    assert (tiny.origin, tiny.ref, tiny.quants, tiny.workload) == (
        "user",
        "tester/Tiny-GGUF:Q4_K_M",
        ("Q4_K_M", "Q8_0"),
        CHAT,
    )


def test_a_new_user_preset_needs_every_required_field() -> None:
    path = _write(user_presets_dir(), "half", 'repo = "tester/Half-GGUF"\nquant = "Q4_K_M"\n')
    with pytest.raises(PresetError) as caught:
        load_presets()
    assert str(path) in caught.value.message and "missing field 'name'" in caught.value.message
    for field in REQUIRED[1:]:
        if field not in ("repo", "quant"):
            assert field in (caught.value.hint or "")


def test_an_override_is_type_checked_too() -> None:
    path = _write(user_presets_dir(), "gpt-oss-20b", 'engine = "tgi"\n')
    with pytest.raises(PresetError) as caught:
        load_presets()
    assert str(path) in caught.value.message and "'engine'" in caught.value.message


def test_unknown_preset_lists_the_names() -> None:
    with pytest.raises(UnknownPresetError) as caught:
        find_preset("no-such-model")
    assert "gpt-oss-20b" in (caught.value.hint or "")
    assert caught.value.exit_code == ExitCode.USAGE
