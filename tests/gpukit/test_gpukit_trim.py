"""The trimmed llama.cpp source of the GPU check kit (tools/trim_llama_source.py) keeps what a
CUDA llama-server + rpc-server build needs: checked on the real pinned sdist, and by a real
CMake configure (CPU + RPC) of the trimmed tree. The CUDA build itself runs on a lent GPU
machine (bench/gpu_check.sh); here every file of the CUDA backend must be kept."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import trim_llama_source as trim  # noqa: E402

# The real cache folder, read before the suite's autouse fixture points it at a fresh one:
# the pinned sdist lives there once `homelab engine build` has run.
REAL_CACHE = os.environ.get("HOMELAB_CACHE_DIR")


@pytest.fixture(scope="module")
def sdist() -> Path:
    """The pinned llama-cpp-python sdist (downloaded by pip into the real cache if absent)."""
    from homelab.engine.llamacpp.source import fetch_sdist

    saved = os.environ.get("HOMELAB_CACHE_DIR")
    if REAL_CACHE is None:
        os.environ.pop("HOMELAB_CACHE_DIR", None)
    else:
        os.environ["HOMELAB_CACHE_DIR"] = REAL_CACHE
    try:
        return fetch_sdist()
    finally:
        if saved is None:
            os.environ.pop("HOMELAB_CACHE_DIR", None)
        else:
            os.environ["HOMELAB_CACHE_DIR"] = saved


@pytest.fixture(scope="module")
def members(sdist: Path) -> dict[str, int]:
    return dict(trim.member_paths(sdist))


@pytest.mark.parametrize(
    "path",
    [
        "CMakeLists.txt",
        "cmake/build-info.cmake",
        "ggml/CMakeLists.txt",
        "ggml/src/ggml.c",
        "ggml/src/ggml-cuda/CMakeLists.txt",
        "ggml/src/ggml-cuda/template-instances/mmq-instance-q8_0.cu",
        "ggml/src/ggml-rpc/ggml-rpc.cpp",
        "ggml/src/ggml-cpu/arch/x86/quants.c",
        "src/llama.cpp",
        "common/arg.cpp",
        "vendor/cpp-httplib/httplib.cpp",
        "tools/server/server.cpp",
        "tools/rpc/rpc-server.cpp",
        "tools/ui/ui.cpp.in",
        "scripts/ui-assets.cmake",
    ],
)
def test_the_rule_keeps_what_the_build_reads(path: str, members: dict[str, int]) -> None:
    assert path in members, f"{path} is not in the sdist any more"
    assert trim.keep(path)


@pytest.mark.parametrize(
    "path",
    [
        ".git",
        "models/ggml-vocab-llama-bpe.gguf",
        "docs/build.md",
        "tests/test-backend-ops.cpp",
        "examples/simple/simple.cpp",
        "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
        "ggml/src/ggml-sycl/ggml-sycl.cpp",
        "tools/ui/package-lock.json",
        "tools/server/tests/conftest.py",
        "gguf-py/gguf/gguf.py",
        "scripts/sync-ggml.sh",
    ],
)
def test_the_rule_drops_what_no_server_build_reads(path: str) -> None:
    assert not trim.keep(path)


def test_every_file_of_the_backends_kept_is_kept_whole(members: dict[str, int]) -> None:
    for backend in trim.GGML_BACKENDS:
        folder = [p for p in members if p.startswith(f"ggml/src/{backend}/")]
        assert len(folder) > 5, backend
        assert [p for p in folder if not trim.keep(p)] == [], backend


def test_trimmed_copy_is_small_and_cmake_configures_it(sdist: Path, tmp_path: Path) -> None:
    out = tmp_path / "llama.cpp"
    manifest = trim.trim(sdist, out)
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert manifest["bytes"] == written - (out / trim.MANIFEST).stat().st_size
    assert written < 32 * 2**20, "the kit must fit the 64 MiB carry with the repository"
    assert manifest["dropped_bytes"] > 4 * written
    cmake = shutil.which("cmake")
    assert cmake, "cmake builds the engine (make engine); it must be here"
    from homelab.engine.llamacpp.build import cmake_args

    build = tmp_path / "build"
    done = subprocess.run(
        [cmake, "-S", str(out), "-B", str(build), *cmake_args("cpu")]
        + ["-DGGML_RPC=ON", "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    makefile = (build / "Makefile").read_text()
    assert "llama-server" in makefile and "ggml-rpc-server" in makefile
    # the server's sources include the UI header generated from the two kept templates
    subprocess.run(
        [cmake, "--build", str(build), "--target", "llama-ui-assets"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    units = [
        e
        for e in json.loads((build / "compile_commands.json").read_text())
        if e["file"].endswith(PREPROCESSED)
    ]
    assert len(units) == len(PREPROCESSED)
    for unit in units:  # every #include of these resolves inside the trimmed copy
        argv = _without_output(shlex.split(unit["command"]))
        done = subprocess.run(
            [*argv, "-E", "-o", os.devnull],
            cwd=unit["directory"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{unit['file']}: {done.stderr[-2000:]}"


PREPROCESSED = (
    "tools/server/server.cpp",
    "tools/server/server-http.cpp",
    "tools/server/server-context.cpp",
    "tools/rpc/rpc-server.cpp",
    "ggml/src/ggml-rpc/ggml-rpc.cpp",
    "common/arg.cpp",
    "src/llama-context.cpp",
)
"""Translation units preprocessed from the trimmed tree (all 227 of the CPU + RPC build did,
once, in 321 s on 2 busy cores: too slow for every run)."""


def _without_output(argv: list[str]) -> list[str]:
    """A compile command without its ``-c`` and ``-o FILE`` (to run it as ``-E``)."""
    kept: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == "-o":
            skip = True
        elif word != "-c":
            kept.append(word)
    return kept
