"""The models folders are kept in the TUI's settings file between runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.errors import UsageError
from homelab.ui.settings import models_dirs_with, saved_models_dirs, settings_path


def test_given_folders_are_saved_and_listed_next_time(tmp_path: Path) -> None:
    assert saved_models_dirs() == []
    first = models_dirs_with([tmp_path / "a", tmp_path / "b"])
    assert first == [tmp_path / "a", tmp_path / "b"]
    assert settings_path().is_file()
    assert models_dirs_with([]) == first  # the next run, without the option
    assert models_dirs_with([tmp_path / "a", tmp_path / "c"]) == [*first, tmp_path / "c"]


def test_a_broken_settings_file_is_a_usage_error_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "ui.toml"
    path.write_text("models_dirs = 3\n")
    with pytest.raises(UsageError) as raised:
        saved_models_dirs(path)
    assert str(path) in raised.value.message
    path.write_bytes(b"\xff\xfe not toml")
    with pytest.raises(UsageError):
        saved_models_dirs(path)
