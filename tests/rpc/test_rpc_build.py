"""The engine build makes rpc-server too (RPC backend on), and homelab finds it like llama-server."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from homelab.engine.llamacpp.build import RPC_TARGET, cmake_args, install_binary
from homelab.engine.llamacpp.locate import (
    ENV_VAR,
    RPC_ENV_VAR,
    RPC_SERVER,
    binary_path,
    install_dir,
    locate_rpc_server,
    looks_like_rpc_server,
    run_help,
)
from homelab.errors import EngineError, ExitCode


def _script(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def empty_world(monkeypatch, tmp_path) -> Path:
    """No overrides, an empty engine folder, an empty PATH; returns the PATH folder."""
    for name in (ENV_VAR, RPC_ENV_VAR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    path_dir = tmp_path / "pathbin"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    return path_dir


@pytest.mark.parametrize("variant", ["cpu", "cuda"])
def test_both_variants_build_with_the_rpc_backend(variant: str) -> None:
    assert "-DGGML_RPC=ON" in cmake_args(variant)  # type: ignore[arg-type]
    assert RPC_TARGET == "ggml-rpc-server"  # the pinned llama.cpp's tools/rpc target


def test_the_build_folder_name_says_rpc_so_an_older_build_is_rebuilt_once(empty_world) -> None:
    assert install_dir("cpu").name.endswith("-cpu-rpc")
    assert binary_path("cpu").parent == install_dir("cpu") / "bin"


def test_install_puts_rpc_server_beside_llama_server(tmp_path: Path) -> None:
    server = _script(tmp_path / "build" / "llama-server", "echo server")
    worker = _script(tmp_path / "build" / RPC_TARGET, "echo worker")
    dest = tmp_path / "engine" / "llama.cpp-bX-cpu-rpc"
    path = install_binary(server, {"variant": "cpu"}, dest, companions={RPC_SERVER: worker})
    installed = dest / "bin" / RPC_SERVER
    assert path == dest / "bin" / "llama-server"
    assert installed.read_text() == worker.read_text() and os.access(installed, os.X_OK)
    assert json.loads((dest / "manifest.json").read_text()) == {"variant": "cpu"}


def test_rpc_server_is_found_beside_the_llama_server_found(empty_world, monkeypatch) -> None:
    server = _script(binary_path("cpu"))
    (install_dir("cpu") / "manifest.json").write_text("{}")
    worker = _script(server.parent / RPC_SERVER)
    assert (locate_rpc_server().path, locate_rpc_server().origin) == (worker, "beside:build:cpu")
    elsewhere = _script(empty_world.parent / "elsewhere" / "llama-server")
    monkeypatch.setenv(ENV_VAR, str(elsewhere))  # a llama-server with no rpc-server beside it
    assert locate_rpc_server().origin == "build:cpu"
    override = _script(empty_world.parent / "mine" / "my-rpc")
    monkeypatch.setenv(RPC_ENV_VAR, str(override))
    assert locate_rpc_server().path == override.resolve()


def test_rpc_server_on_path_under_either_name(empty_world) -> None:
    upstream = _script(empty_world / "ggml-rpc-server")
    assert locate_rpc_server().path == upstream.resolve()
    plain = _script(empty_world / "rpc-server")
    assert locate_rpc_server().path == plain.resolve()


def test_no_rpc_server_says_to_build_it(empty_world, monkeypatch) -> None:
    with pytest.raises(EngineError) as error:
        locate_rpc_server()
    assert "homelab engine build" in (error.value.hint or "")
    assert RPC_ENV_VAR in (error.value.hint or "")
    assert error.value.exit_code == ExitCode.ENGINE
    monkeypatch.setenv(RPC_ENV_VAR, str(empty_world / "nope"))
    with pytest.raises(EngineError, match="does not exist"):
        locate_rpc_server()


def test_the_built_rpc_server_answers_help_like_rpc_server() -> None:
    """The real one (``homelab engine build`` made it beside llama-server)."""
    located = locate_rpc_server()
    usage = run_help(located.path) or ""
    assert looks_like_rpc_server(usage), usage
    assert not looks_like_rpc_server(run_help(Path("/bin/true")) or "")
