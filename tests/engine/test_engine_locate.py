"""homelab.engine.llamacpp.locate: which llama-server runs, its version, and ``homelab engine path``."""

from __future__ import annotations

import argparse
import json
import stat
from pathlib import Path

import pytest

from homelab.cli import engine_cmd, report_error
from homelab.engine.llamacpp.locate import (
    ENV_VAR,
    LLAMA_CPP_BUILD_NUMBER,
    LLAMA_CPP_COMMIT,
    EngineVersion,
    binary_path,
    engine_version,
    find_llama_server,
    install_dir,
    locate_llama_server,
    parse_version_output,
    read_manifest,
    run_version,
)
from homelab.errors import EngineError, ExitCode, HomelabError

NEW_STYLE = (
    "version: 0.5.0-dev (build 42, commit abc1234)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
)


def _fake_server(path: Path, version_text: str = NEW_STYLE) -> Path:
    """A tiny real executable that answers ``--version`` like llama-server (on stderr)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\nprintf '%s' '{version_text}' >&2\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _fake_build(variant: str) -> Path:
    binary = _fake_server(binary_path(variant))
    (install_dir(variant) / "manifest.json").write_text(json.dumps({"variant": variant}))
    return binary


@pytest.fixture
def empty_world(monkeypatch, tmp_path) -> Path:
    """No override, an empty engine folder and a PATH with nothing on it; returns that PATH dir."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    path_dir = tmp_path / "pathbin"
    path_dir.mkdir()
    monkeypatch.setenv("PATH", str(path_dir))
    return path_dir


# --- resolution order ----------------------------------------------------------------


def test_env_override_wins_over_everything(monkeypatch, tmp_path, empty_world) -> None:
    _fake_build("cuda")
    _fake_server(empty_world / "llama-server")
    mine = _fake_server(tmp_path / "custom" / "my-llama-server")
    monkeypatch.setenv(ENV_VAR, str(mine))
    located = locate_llama_server()
    assert (located.path, located.origin) == (mine.resolve(), "env")
    assert find_llama_server() == mine.resolve()


def test_env_override_to_a_missing_file_names_it(monkeypatch, tmp_path, empty_world) -> None:
    _fake_build("cpu")  # must not fall back silently
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(EngineError) as error:
        find_llama_server()
    assert ENV_VAR in error.value.message and str(tmp_path / "nope") in error.value.message
    assert "does not exist" in error.value.message
    assert error.value.exit_code == ExitCode.ENGINE


def test_env_override_to_a_non_executable_names_it(monkeypatch, tmp_path, empty_world) -> None:
    plain = tmp_path / "llama-server"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    monkeypatch.setenv(ENV_VAR, str(plain))
    with pytest.raises(EngineError, match="not an executable file") as error:
        find_llama_server()
    assert ENV_VAR in error.value.message and "chmod +x" in error.value.hint
    monkeypatch.setenv(ENV_VAR, str(tmp_path))  # a folder is not a binary either
    with pytest.raises(EngineError, match="not an executable file"):
        find_llama_server()


def test_our_cuda_build_beats_our_cpu_build_beats_path(empty_world) -> None:
    on_path = _fake_server(empty_world / "llama-server")
    assert locate_llama_server().origin == "path"
    assert find_llama_server() == on_path.resolve()
    cpu = _fake_build("cpu")
    assert (find_llama_server(), locate_llama_server().origin) == (cpu, "build:cpu")
    cuda = _fake_build("cuda")
    assert (find_llama_server(), locate_llama_server().origin) == (cuda, "build:cuda")


def test_a_build_without_manifest_or_exec_bit_does_not_count(empty_world) -> None:
    binary = _fake_server(binary_path("cpu"))  # interrupted install: no manifest
    with pytest.raises(EngineError):
        find_llama_server()
    (install_dir("cpu") / "manifest.json").write_text("{}")
    binary.chmod(0o644)
    with pytest.raises(EngineError):
        find_llama_server()
    binary.chmod(0o755)
    assert find_llama_server() == binary
    assert read_manifest("cpu") == {}


def test_nothing_found_says_to_fetch_or_build(empty_world) -> None:
    with pytest.raises(EngineError) as error:
        find_llama_server()
    assert "homelab engine fetch" in error.value.hint  # seconds, so named first
    assert "homelab engine build" in error.value.hint
    assert ENV_VAR in error.value.hint
    assert str(binary_path("cpu")) in error.value.message
    assert error.value.exit_code == ExitCode.ENGINE


def test_install_layout_is_versioned_under_data_dir(empty_world, tmp_path) -> None:
    assert binary_path("cpu") == (
        tmp_path
        / "data"
        / "engine"
        / f"llama.cpp-b{LLAMA_CPP_BUILD_NUMBER}-cpu-rpc"
        / "bin"
        / "llama-server"
    )


# --- versions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (NEW_STYLE, EngineVersion(42, "abc1234", "0.5.0-dev")),
        (
            "ggml_cuda_init: found 1 CUDA devices\nversion: 4567 (b1a2c3d)\nbuilt with cc",
            EngineVersion(4567, "b1a2c3d"),
        ),
        ("usage: llama-server [options]", None),
        ("", None),
    ],
)
def test_parse_version_output(text: str, expected: EngineVersion | None) -> None:
    assert parse_version_output(text) == expected


def test_engine_version_runs_the_binary(tmp_path) -> None:
    assert engine_version(_fake_server(tmp_path / "a")) == "b42-abc1234"
    assert engine_version(_fake_server(tmp_path / "b", "nothing useful")) is None
    assert engine_version(tmp_path / "missing") is None
    assert run_version(tmp_path / "missing") is None


# --- command line ----------------------------------------------------------------------


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run ``homelab engine ...`` the way homelab.cli.main does (errors → exit codes)."""
    parser = argparse.ArgumentParser(prog="homelab")
    engine_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args))
    except HomelabError as error:
        report_error(error)
        code = int(error.exit_code)
    out, err = capsys.readouterr()
    return code, out, err


def test_engine_path_prints_the_binary(monkeypatch, tmp_path, empty_world, capsys) -> None:
    mine = _fake_server(tmp_path / "srv")
    monkeypatch.setenv(ENV_VAR, str(mine))
    unknown = "backend: unknown (it did not list its devices)\n"  # the fake lists nothing
    assert _cli(["engine", "path"], capsys) == (0, f"{mine.resolve()}\n", unknown)
    assert _cli(["engine", "version"], capsys) == (0, "b42-abc1234\n", "")


def test_engine_path_without_engine_exits_6_with_hint(empty_world, capsys) -> None:
    code, out, err = _cli(["engine", "path"], capsys)
    assert (code, out) == (6, "")
    assert "homelab: No engine:" in err and "homelab engine build" in err


def test_engine_version_of_a_silent_binary_is_an_engine_error(
    monkeypatch, tmp_path, empty_world, capsys
) -> None:
    monkeypatch.setenv(ENV_VAR, str(_fake_server(tmp_path / "srv", "hello")))
    code, out, err = _cli(["engine", "version"], capsys)
    assert (code, out) == (6, "") and "could not read a version" in err


# --- the real engine ---------------------------------------------------------------------


@pytest.mark.engine
def test_real_llama_server_is_the_pinned_release(llama_server_bin: Path, capsys) -> None:
    output = run_version(llama_server_bin)
    assert output is not None, f"{llama_server_bin} --version did not run"
    parsed = parse_version_output(output)
    assert parsed is not None, output
    assert (parsed.build, parsed.commit) == (LLAMA_CPP_BUILD_NUMBER, LLAMA_CPP_COMMIT), output
    assert engine_version(llama_server_bin) == f"b{LLAMA_CPP_BUILD_NUMBER}-{LLAMA_CPP_COMMIT}"
    assert _cli(["engine", "version"], capsys)[:2] == (0, f"{parsed.tag}\n")


@pytest.mark.engine
def test_real_build_manifest_matches_its_binary(llama_server_bin: Path) -> None:
    origin = locate_llama_server().origin
    if not origin.startswith("build:"):
        pytest.skip(f"llama-server comes from {origin}, not from `homelab engine build`")
    manifest = read_manifest(origin.split(":")[1])
    assert manifest is not None
    assert manifest["version"] == f"b{LLAMA_CPP_BUILD_NUMBER}"
    assert manifest["variant"] == origin.split(":")[1]
    assert f"build {LLAMA_CPP_BUILD_NUMBER}" in manifest["version_output"]
    assert "-DBUILD_SHARED_LIBS=OFF" in manifest["cmake_args"]
