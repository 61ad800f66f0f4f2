"""The llama-server the user pointed the app to is kept in the TUI settings file, beside the
models folders, and neither key loses the other."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from homelab.errors import UsageError
from homelab.ui.settings import (
    llama_server_setting,
    models_dirs_with,
    save_llama_server,
    saved_llama_server,
    saved_models_dirs,
    settings_path,
)


def test_the_binary_is_kept_and_the_folders_with_it(tmp_path: Path) -> None:
    assert saved_llama_server() is None
    models_dirs_with([tmp_path / "models"])
    save_llama_server(tmp_path / "bin" / "llama-server")
    assert saved_llama_server() == tmp_path / "bin" / "llama-server"
    assert saved_models_dirs() == [tmp_path / "models"]
    models_dirs_with([tmp_path / "more"])  # a new folder keeps the binary
    assert saved_llama_server() == tmp_path / "bin" / "llama-server"
    data = tomllib.loads(settings_path().read_text())
    assert data == {
        "models_dirs": [str(tmp_path / "models"), str(tmp_path / "more")],
        "llama_server": str(tmp_path / "bin" / "llama-server"),
    }
    save_llama_server(None)
    assert saved_llama_server() is None and len(saved_models_dirs()) == 2
    assert str(settings_path()) in llama_server_setting()


def test_a_llama_server_that_is_not_a_path_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "ui.toml"
    path.write_text("llama_server = 3\n")
    with pytest.raises(UsageError) as raised:
        saved_llama_server(path)
    assert str(path) in raised.value.message and "llama_server" in raised.value.hint
