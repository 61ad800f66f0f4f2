"""homelab.engine.llamacpp.build: cmake options, progress, checksums, extraction, install, errors."""

from __future__ import annotations

import argparse
import io
import json
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from homelab.cli import engine_cmd
from homelab.engine.llamacpp import build, cuda_build, source
from homelab.engine.llamacpp.build import (
    build_llama_server,
    build_manifest,
    check_free_space,
    check_toolchain,
    cmake_args,
    install_binary,
    resolve_variant,
)
from homelab.engine.llamacpp.build_steps import BuildStepFailed, diagnose, parse_progress, run_step
from homelab.engine.llamacpp.locate import LLAMA_CPP_BUILD_NUMBER, LLAMA_CPP_COMMIT, binary_path
from homelab.engine.llamacpp.source import (
    SDIST_SHA256,
    SDIST_SOURCE_DIR,
    extract_source,
    fetch_sdist,
    sha256_file,
    verify_sha256,
)
from homelab.errors import EngineError, ExitCode
from homelab.gpu.probe import probe

GPU_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- cmake options -----------------------------------------------------------------


def test_cpu_args_are_release_static_offline_and_pinned() -> None:
    args = cmake_args("cpu")
    for option in (
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_OPENSSL=OFF",
        f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD_NUMBER}",
        f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
    ):
        assert option in args
    assert not any("CUDA" in a for a in args)
    assert all(a.startswith("-D") and "=" in a for a in args)


def test_cuda_args_add_the_cuda_backend_and_the_system_toolkit_names_its_cards(
    monkeypatch, tmp_path: Path
) -> None:
    args = cmake_args("cuda")
    assert set(cmake_args("cpu")) | {"-DGGML_CUDA=ON"} == set(args)
    toolkit = tmp_path / "cuda"  # a whole system toolkit: nvcc with cuBLAS's headers beside it
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (toolkit / "include" / "cublas_v2.h").write_text("")
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: str(toolkit / "bin" / "nvcc"))
    monkeypatch.setenv(cuda_build.ARCH_ENV, "86-real;89-real")
    config = cuda_build.cuda_configuration(None, lambda fraction, line: None)
    assert config.args == [
        f"-DCMAKE_CUDA_COMPILER={toolkit / 'bin' / 'nvcc'}",
        "-DCMAKE_CUDA_ARCHITECTURES=86-real;89-real",
    ]
    assert config.summary == "CUDA (system toolkit) for sm_86, sm_89"


def test_a_system_nvcc_without_cublas_is_not_a_whole_toolkit(monkeypatch, tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("#!/bin/sh\n")  # what the wheels' nvcc alone gives
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: str(tmp_path / "bin" / "nvcc"))
    assert cuda_build.system_toolkit() is None
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: None)
    assert cuda_build.system_toolkit() is None


@pytest.mark.parametrize(("driver", "expected"), [(True, "cuda"), (False, "cpu")])
def test_with_a_driver_the_engine_is_cuda_toolkit_or_not(monkeypatch, driver, expected) -> None:
    """A machine with a card never gets a CPU engine unasked: no toolkit means the wheels."""
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: None)
    monkeypatch.setattr(build, "nvidia_driver_present", lambda: driver)
    assert resolve_variant(None) == expected
    assert resolve_variant("cpu") == "cpu"
    assert resolve_variant("cuda") == "cuda"


def test_a_replayed_card_stands_for_the_driver(monkeypatch) -> None:
    monkeypatch.setattr(build, "nvidia_driver_present", lambda: False)
    card = probe(snapshot=GPU_FIXTURES / "rtx3090_wayland.json", window_s=0.0)
    assert resolve_variant(None, card) == "cuda"
    assert resolve_variant(None, probe(snapshot=GPU_FIXTURES / "no_gpu.json")) == "cpu"


def test_unknown_variant_is_an_engine_error() -> None:
    with pytest.raises(EngineError, match="unknown engine variant 'rocm'"):
        resolve_variant("rocm")


# --- progress ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "fraction"),
    [
        ("[  0%] Building CXX object vendor/hash/CMakeFiles/vendor-hash.dir/hash.cpp.o", 0.0),
        ("[ 45%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o\n", 0.45),
        ("[100%] Built target llama-server", 1.0),
        ("[12/48] Building CXX object common/CMakeFiles/common.dir/arg.cpp.o", 0.25),
        ("-- Configuring done", None),
        ("/usr/include/x.h:1:2: warning: [ 45%] not at the start", None),
        ("[0/0] nothing", None),
        ("", None),
    ],
)
def test_parse_progress(line: str, fraction: float | None) -> None:
    assert parse_progress(line) == fraction


def test_run_step_tees_output_reports_progress_and_keeps_the_tail(tmp_path: Path) -> None:
    seen: list[tuple[float | None, str]] = []
    log = io.StringIO()
    code = "print('[ 50%] half'); print('boom: No space left on device'); raise SystemExit(3)"
    with pytest.raises(BuildStepFailed) as failed:
        run_step(
            "cmake build", [sys.executable, "-c", code], log, lambda f, line: seen.append((f, line))
        )
    assert seen == [(0.5, "[ 50%] half")]
    assert failed.value.args[0] == "cmake build"
    assert "boom: No space left on device" in failed.value.args[1]
    assert "[ 50%] half" in log.getvalue() and "$ " in log.getvalue()
    run_step(
        "ok",
        [sys.executable, "-c", "print('[100%] done')"],
        log,
        lambda f, line: seen.append((f, line)),
    )
    assert seen[-1] == (1.0, "[100%] done")


def test_progress_printer_plain_lines_off_a_terminal() -> None:
    out = io.StringIO()
    printer = engine_cmd.ProgressPrinter(out, tty=False)
    printer(None, "configuring")
    printer(0.5, "[ 50%] Building x")
    printer(1.0, "installed /x/llama-server")
    printer.close()
    assert out.getvalue().splitlines() == [
        "configuring",
        "[ 50%] Building x",
        "[100%] installed /x/llama-server",
    ]


def test_progress_printer_rewrites_one_line_on_a_terminal() -> None:
    out = io.StringIO()
    printer = engine_cmd.ProgressPrinter(out, tty=True)
    printer(0.1, "[ 10%] a")
    printer(0.2, "[ 20%] b" + "x" * 500)
    printer.close()
    text = out.getvalue()
    assert text.count("\r\x1b[K") == 2 and text.endswith("\n") and text.count("\n") == 1
    assert all(len(part) < 500 for part in text.split("\r\x1b[K"))


# --- checksums and source ------------------------------------------------------------


def test_verify_sha256_accepts_the_right_file(tmp_path: Path) -> None:
    path = tmp_path / "a.tar.gz"
    path.write_bytes(b"llama")
    verify_sha256(path, sha256_file(path))
    assert path.exists()


def test_verify_sha256_deletes_a_corrupted_file(tmp_path: Path) -> None:
    path = tmp_path / "a.tar.gz"
    path.write_bytes(b"llama")
    good = sha256_file(path)
    path.write_bytes(b"llamb")
    with pytest.raises(EngineError) as error:
        verify_sha256(path, good)
    assert good in error.value.message and "deleted" in error.value.message
    assert error.value.exit_code == ExitCode.ENGINE
    assert not path.exists()


def test_fetch_sdist_rejects_a_corrupted_cached_copy_without_downloading(monkeypatch) -> None:
    from homelab.paths import cache_dir

    cached = cache_dir() / "sources" / source.SDIST_FILE
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the sdist")
    monkeypatch.setattr(source.subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    with pytest.raises(EngineError, match=SDIST_SHA256):
        fetch_sdist()
    assert not cached.exists()


def test_fetch_sdist_reuses_a_good_cached_copy(monkeypatch) -> None:
    from homelab.paths import cache_dir

    cached = cache_dir() / "sources" / source.SDIST_FILE
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"pretend sdist")
    monkeypatch.setattr(source, "SDIST_SHA256", sha256_file(cached))
    monkeypatch.setattr(source.subprocess, "run", lambda *a, **k: pytest.fail("downloaded"))
    assert fetch_sdist() == cached


def test_fetch_sdist_offline_says_how_to_provide_the_file(monkeypatch) -> None:
    """A real pip run against an index nobody listens on."""
    for name, value in {
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(EngineError) as error:
        fetch_sdist()
    assert error.value.title == "Source download failed"
    assert "llama-cpp-python==0.3.36" in error.value.message
    assert source.SDIST_FILE in error.value.hint and SDIST_SHA256 in error.value.hint
    assert not any((Path(os.environ["HOMELAB_CACHE_DIR"]) / "sources").iterdir())


def _fake_sdist(path: Path, with_source: bool = True) -> Path:
    files = {"llama_cpp_python-0.3.36/llama_cpp/__init__.py": b"x"}
    if with_source:
        files |= {
            f"{SDIST_SOURCE_DIR}/CMakeLists.txt": b"project(x)",
            f"{SDIST_SOURCE_DIR}/.git": b"gitdir: ../../.git/modules/vendor/llama.cpp",
            f"{SDIST_SOURCE_DIR}/.github/workflows/a.yml": b"on: push",
            f"{SDIST_SOURCE_DIR}/src/llama.cpp": b"int main(){}",
        }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_extract_source_takes_only_vendor_llama_cpp(tmp_path: Path) -> None:
    dest = extract_source(_fake_sdist(tmp_path / "s.tar.gz"), tmp_path / "src")
    found = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert found == [".github/workflows/a.yml", "CMakeLists.txt", "src/llama.cpp"]
    assert not (tmp_path / "src.partial").exists()


def test_extract_source_without_llama_cpp_is_an_engine_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="holds no"):
        extract_source(_fake_sdist(tmp_path / "s.tar.gz", with_source=False), tmp_path / "src")


# --- manifest and install ------------------------------------------------------------


def test_manifest_records_version_variant_source_and_args() -> None:
    args = cmake_args("cpu")
    manifest = build_manifest(
        variant="cpu",
        args=args,
        seconds=361.26,
        version_output="version: 0.5.0-dev (build 11312, commit 0c1e57098)\n",
    )
    assert manifest["version"] == f"b{LLAMA_CPP_BUILD_NUMBER}" and manifest["variant"] == "cpu"
    assert manifest["source"]["sha256"] == SDIST_SHA256
    assert manifest["source"]["version"] == "0.3.36"
    assert manifest["cmake_args"] == args and manifest["build_seconds"] == 361.3
    assert manifest["version_output"].endswith("commit 0c1e57098)")
    assert json.loads(json.dumps(manifest)) == manifest


def test_install_binary_is_complete_and_replaces_an_old_build(tmp_path: Path) -> None:
    built = _script(tmp_path / "build" / "llama-server", "echo new")
    dest = tmp_path / "engine" / "llama.cpp-b1-cpu"
    (dest / "bin").mkdir(parents=True)
    (dest / "bin" / "llama-server").write_text("old")
    (dest / "stale").write_text("x")
    path = install_binary(built, {"variant": "cpu"}, dest)
    assert path == dest / "bin" / "llama-server" and os.access(path, os.X_OK)
    assert path.read_text() == built.read_text()
    assert json.loads((dest / "manifest.json").read_text()) == {"variant": "cpu"}
    assert not (dest / "stale").exists()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert sorted(p.name for p in dest.parent.iterdir()) == ["llama.cpp-b1-cpu"]


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tail", "message", "hint"),
    [
        ("x.o: No space left on device", "disk filled up", "free some disk space"),
        (
            "CMake Error: No CMAKE_CXX_COMPILER could be found.",
            "no C++ compiler",
            "build-essential",
        ),
        ("CMake Error: No CMAKE_C_COMPILER could be found.", "no C compiler", "build-essential"),
        ("No CMAKE_CUDA_COMPILER could be found", "nvcc", "--cpu"),
        ('Target "ggml-cuda" links to:\n    CUDA::cublas', "no cuBLAS", "--cpu"),
        ("CMake 3.18 or higher is required.  You are running version 3.13", "too old", "cmake"),
        ("c++: fatal error: Killed signal terminated program cc1plus", "killed", "--jobs 1"),
        ("error: something else\nmake: *** [all] Error 2", "cmake build failed", "full build log"),
    ],
)
def test_diagnose_names_cause_and_next_step(tail: str, message: str, hint: str) -> None:
    error = diagnose("cmake build", tail)
    assert message in error.message and hint in error.hint
    assert tail in error.message  # the log tail is kept in the error
    assert error.exit_code == ExitCode.ENGINE


def _only_on_path(monkeypatch, tmp_path: Path, *tools: str) -> None:
    bin_dir = tmp_path / "onlybin"
    bin_dir.mkdir()
    for tool in tools:
        _script(bin_dir / tool, "exit 0")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.delenv("CXX", raising=False)


@pytest.mark.parametrize(
    ("tools", "missing"),
    [
        ((), "cmake not found"),
        (("cmake",), "make not found"),
        (("cmake", "make"), "no C compiler"),
        (("cmake", "make", "gcc"), "no C++ compiler"),
    ],
)
def test_missing_build_tools_name_the_debian_packages(
    monkeypatch, tmp_path, tools, missing
) -> None:
    _only_on_path(monkeypatch, tmp_path, *tools)
    with pytest.raises(EngineError) as error:
        check_toolchain()
    assert missing in error.value.message
    assert "apt-get install cmake build-essential" in error.value.hint


def test_too_little_disk_space_is_an_engine_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(build.FREE_BYTES_NEEDED, "cpu", 1 << 60)
    with pytest.raises(EngineError, match="GiB free") as error:
        check_free_space(tmp_path, "cpu")
    assert error.value.title == "No disk space"


# --- the whole command, without compiling ------------------------------------------------


def test_existing_build_is_returned_without_tools_or_network(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    _only_on_path(monkeypatch, tmp_path)  # no cmake, no compiler: must not be needed
    installed = install_binary(
        _script(tmp_path / "b" / "llama-server", "exit 0"),
        {"variant": "cpu"},
        binary_path("cpu").parent.parent,
    )
    seen: list[tuple[float | None, str]] = []
    got = build_llama_server(variant="cpu", progress=lambda f, line: seen.append((f, line)))
    assert got == installed
    assert seen and seen[-1][0] == 1.0 and "already built" in seen[-1][1]
    with pytest.raises(EngineError, match="cmake not found"):
        build_llama_server(variant="cpu", force=True)


def test_missing_build_checks_tools_before_downloading(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    _only_on_path(monkeypatch, tmp_path)
    monkeypatch.setattr(build, "fetch_sdist", lambda *a: pytest.fail("downloaded"))
    with pytest.raises(EngineError, match="cmake not found"):
        build_llama_server(variant="cpu")


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="homelab")
    engine_cmd.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_build_command_line() -> None:
    args = _parse(["engine", "build", "--cpu", "--jobs", "3", "--force"])
    assert (args.variant, args.jobs, args.force) == ("cpu", 3, True)
    assert args.func is engine_cmd.run_build
    args = _parse(["engine", "build"])
    assert (args.variant, args.jobs, args.force) == (None, None, False)
    assert _parse(["engine", "build", "--cuda"]).variant == "cuda"
    for bad in (["--cpu", "--cuda"], ["--jobs", "0"], ["--jobs", "x"]):
        with pytest.raises(SystemExit) as exit_:
            _parse(["engine", "build", *bad])
        assert exit_.value.code == 2
