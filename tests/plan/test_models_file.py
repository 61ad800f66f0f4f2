"""models.toml: the set of models a person owns, read and every field checked; hostile input
refused naming the file and the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from homelab.errors import ExitCode
from homelab.plan.models_file import (
    MAX_FILE_BYTES,
    ModelsFileError,
    check_names,
    default_models_file,
    load_models_file,
    matches,
    set_slots,
)
from homelab.plan.workload import AGENT, CHAT, FIM, parse_workload

GOOD = """
[[model]]
model = "qwen3-coder-30b"
workload = "agent"
id = "coder"
aliases = ["claude-sonnet-*", "gpt-5"]

[[model]]
model = "Qwen/Qwen2.5-Coder-1.5B-GGUF:Q8_0"
workload = "fim"
aliases = ["claude-haiku-*"]

[[model]]
model = "/models/chat.gguf"
workload = "32k"
slots = 3
"""


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "models.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_a_good_list_reads_in_its_order_with_every_field(tmp_path: Path) -> None:
    entries = load_models_file(_write(tmp_path, GOOD))
    assert [e.model for e in entries] == [
        "qwen3-coder-30b",
        "Qwen/Qwen2.5-Coder-1.5B-GGUF:Q8_0",
        "/models/chat.gguf",
    ]
    assert [e.workload for e in entries] == [AGENT, FIM, parse_workload("32k")]
    assert [e.id for e in entries] == ["coder", None, None]
    assert entries[0].aliases == ("claude-sonnet-*", "gpt-5")
    assert [e.slots for e in entries] == [None, None, 3]


def test_fim_is_a_short_workload_with_two_slots() -> None:
    assert parse_workload("fim") is FIM and parse_workload("Autocomplete") is FIM
    assert FIM.tokens_per_slot < CHAT.tokens_per_slot
    assert (set_slots(FIM), set_slots(AGENT), set_slots(CHAT)) == (2, 1, 1)


def test_the_default_list_is_in_the_config_folder(tmp_path: Path) -> None:
    # conftest points HOMELAB_CONFIG_DIR at a fresh folder for each test
    assert default_models_file() == Path(os.environ["HOMELAB_CONFIG_DIR"]) / "models.toml"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (b'[[model]]\nmodel = "\xff\xfe"\nworkload = "chat"\n', "byte 19 is not UTF-8"),
        ("[[model]\nmodel = 1", "not valid TOML"),
        ("title = 'mine'\n[[model]]\nmodel='a'\nworkload='chat'", "unknown key 'title'"),
        ("[[model]]\nmodel='a'\nworkload='chat'\nport=8080", "model 1: unknown key 'port'"),
        ("", "no [[model]] entry"),
        ("model = 'a'", "no [[model]] entry"),
        ("[[model]]\nworkload='chat'", "model 1: missing key 'model'"),
        ("[[model]]\nmodel='a'", "model 1: missing key 'workload'"),
        ("[[model]]\nmodel=3\nworkload='chat'", "key 'model' must be a string, not a number"),
        ("[[model]]\nmodel='a'\nworkload='lots'", "key 'workload': unknown workload 'lots'"),
        ("[[model]]\nmodel='a'\nworkload='chat'\nslots=0", "key 'slots' must be a whole number"),
        ("[[model]]\nmodel='a'\nworkload='chat'\nslots=true", "key 'slots' must be a whole"),
        ("[[model]]\nmodel='a'\nworkload='chat'\nid='a b'", "key 'id' 'a b' is not a clean id"),
        ("[[model]]\nmodel='a'\nworkload='chat'\naliases='x'", "key 'aliases' must be a list"),
        ("[[model]]\nmodel='a'\nworkload='chat'\naliases=['x y']", "alias 'x y' is not a model"),
        ("[[model]]\nmodel='a'\nworkload='chat'\naliases=['x','X']", "alias 'X' is listed twice"),
        ('[[model]]\nmodel="a\\u0007"\nworkload="chat"', "key 'model' must be printable"),
        (
            "[[model]]\nmodel='a'\nworkload='chat'\nid='m'\n"
            "[[model]]\nmodel='b'\nworkload='fim'\nid='M'",
            "models 1 and 2 both have the id 'M'",
        ),
        (
            "[[model]]\nmodel='a'\nworkload='chat'\naliases=['claude-*']\n"
            "[[model]]\nmodel='b'\nworkload='fim'\naliases=['claude-haiku-*']",
            "the alias 'claude-haiku-*' of model 2 also matches 'claude-*' of model 1",
        ),
        (
            "[[model]]\nmodel='a'\nworkload='chat'\nid='small'\n"
            "[[model]]\nmodel='b'\nworkload='fim'\naliases=['sm*']",
            "the alias 'sm*' of model 2 also matches 'small' of model 1",
        ),
    ],
)
def test_hostile_lists_are_refused_naming_the_file_and_key(
    tmp_path: Path, text: str | bytes, says: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ModelsFileError) as caught:
        load_models_file(path)
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message.startswith(str(path)), caught.value.message
    assert says in caught.value.message


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    entry = "[[model]]\nmodel = 'a'\nworkload = 'chat'\n"
    path = _write(tmp_path, entry * (MAX_FILE_BYTES // len(entry) + 1))
    with pytest.raises(ModelsFileError, match="cannot be read"):
        load_models_file(path)
    just_under = "# " + "x" * (MAX_FILE_BYTES - len(entry) - 3) + "\n" + entry
    assert len(just_under.encode()) <= MAX_FILE_BYTES
    assert len(load_models_file(_write(tmp_path, just_under))) == 1


def test_a_missing_file_or_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelsFileError, match="cannot be read"):
        load_models_file(tmp_path / "nope.toml")
    with pytest.raises(ModelsFileError, match="cannot be read"):
        load_models_file(tmp_path)


def test_too_many_models_are_refused(tmp_path: Path) -> None:
    entry = "[[model]]\nmodel = 'a'\nworkload = 'chat'\n"
    with pytest.raises(ModelsFileError, match="a set holds at most 32"):
        load_models_file(_write(tmp_path, entry * 33))


def test_derived_ids_are_checked_like_given_ones() -> None:
    check_names([("a", ()), ("b", ("x-*",))], "list")
    with pytest.raises(ModelsFileError, match="models 1 and 2 both have the id 'Same'"):
        check_names([("same", ()), ("Same", ())], "list")
    with pytest.raises(ModelsFileError, match="alias 'qwen\\*' of model 2 also matches 'qwen3-8b'"):
        check_names([("qwen3-8b", ()), ("coder", ("qwen*",))], "list")


def test_a_request_name_matches_the_id_or_an_alias_glob() -> None:
    assert matches("claude-haiku-4-5-20251001", "small", ("claude-haiku-*",))
    assert matches("SMALL", "small", ())
    assert not matches("claude-sonnet-4-5", "small", ("claude-haiku-*",))
