"""A llama-server a front-end was told to use (the TUI's saved choice), and the check that a
binary someone points to really is llama-server."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.locate import (
    ENV_VAR,
    LLAMA_CPP_BUILD_NUMBER,
    LLAMA_CPP_COMMIT,
    binary_path,
    check_llama_server,
    configure_llama_server,
    install_dir,
    locate_llama_server,
)
from homelab.errors import EngineError

VERSION_LINE = "version: 0.5.0-dev (build 42, commit abc1234)"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def empty_world(monkeypatch, tmp_path) -> Iterator[Path]:
    """No override, no configured binary, an empty engine folder and an empty PATH dir."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    path_dir = tmp_path / "pathbin"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    configure_llama_server(None)
    yield path_dir
    configure_llama_server(None)


def test_a_configured_binary_beats_builds_and_path_but_not_the_env_var(
    empty_world: Path, tmp_path: Path, monkeypatch
) -> None:
    _script(empty_world / "llama-server", "true")
    _script(binary_path("cpu"), "true")
    (install_dir("cpu") / "manifest.json").write_text(json.dumps({"variant": "cpu"}))
    assert locate_llama_server().origin == "build:cpu"
    mine = _script(tmp_path / "mine" / "llama-server", "true")
    configure_llama_server(mine, setting="llama_server in ui.toml")
    assert locate._configured == locate._Configured(mine, "llama_server in ui.toml")
    assert (locate_llama_server().path, locate_llama_server().origin) == (
        mine.resolve(),
        "setting",
    )
    env = _script(tmp_path / "env" / "llama-server", "true")
    monkeypatch.setenv(ENV_VAR, str(env))
    assert locate_llama_server().origin == "env"
    monkeypatch.delenv(ENV_VAR)
    configure_llama_server(None)
    assert locate_llama_server().origin == "build:cpu"


def test_a_configured_binary_that_is_gone_is_named_with_its_setting(
    empty_world: Path, tmp_path: Path
) -> None:
    _script(empty_world / "llama-server", "true")  # must not fall back silently
    configure_llama_server(tmp_path / "gone", setting="llama_server in ui.toml")
    with pytest.raises(EngineError) as error:
        locate_llama_server()
    assert "llama_server in ui.toml points to" in error.value.message
    assert "does not exist" in error.value.message
    assert "llama_server in ui.toml" in (error.value.hint or "")


def test_the_real_llama_server_passes_the_check(llama_server_bin: Path) -> None:
    version = check_llama_server(llama_server_bin)
    assert version.tag == f"b{LLAMA_CPP_BUILD_NUMBER}-{LLAMA_CPP_COMMIT}"


def test_what_is_not_llama_server_is_refused_saying_why(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        check_llama_server(tmp_path / "nothing", setting="the path")
    plain = tmp_path / "plain"
    plain.write_text("text\n")
    with pytest.raises(EngineError, match="not an executable file") as error:
        check_llama_server(plain, setting="the path")
    assert "chmod +x" in (error.value.hint or "")
    with pytest.raises(EngineError, match="not an executable file"):
        check_llama_server(tmp_path, setting="the path")  # a folder
    chatty = _script(tmp_path / "chatty", "echo 'hello there'")
    with pytest.raises(EngineError) as error:
        check_llama_server(chatty, setting="the path")
    assert error.value.title == "Not llama-server"
    assert "hello there" in error.value.message and "the path" in (error.value.hint or "")
    other_tool = _script(tmp_path / "llama-cli", f"echo '{VERSION_LINE}'")  # no --slots
    with pytest.raises(EngineError) as error:
        check_llama_server(other_tool, setting="the path")
    assert "b42-abc1234 but not its server" in error.value.message
    server_like = _script(
        tmp_path / "server-like",
        f'if [ "$1" = --help ]; then echo "--slots, --no-slots"; else echo \'{VERSION_LINE}\'; fi',
    )
    assert check_llama_server(server_like).tag == "b42-abc1234"
