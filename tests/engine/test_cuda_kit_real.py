"""The CUDA toolkit wheels for real: installed from the package registry into homelab's data
folder (once, kept by version like the engine), llama.cpp's CUDA backend configured against
them by CMake, and one CUDA source file compiled for one architecture. The whole CUDA build
takes too long for two cores; bench/GPU_CHECK.md runs it first on a lent GPU machine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from homelab.engine.llamacpp import cuda_kit
from homelab.engine.llamacpp.build import cmake_args

ROOT = Path(__file__).resolve().parents[2]
REAL_CACHE = os.environ.get("HOMELAB_CACHE_DIR")  # read before the suite isolates it
sys.path.insert(0, str(ROOT / "tools"))

import trim_llama_source as trim  # noqa: E402


@pytest.fixture(scope="module")
def kit() -> cuda_kit.Kit:
    lines: list[str] = []
    installed = cuda_kit.ensure_kit(lambda fraction, line: lines.append(line))
    assert installed == cuda_kit.installed_kit()
    return installed


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from homelab.engine.llamacpp.source import fetch_sdist

    saved = os.environ.get("HOMELAB_CACHE_DIR")
    os.environ.pop("HOMELAB_CACHE_DIR", None)
    if REAL_CACHE is not None:
        os.environ["HOMELAB_CACHE_DIR"] = REAL_CACHE
    try:
        sdist = fetch_sdist()
    finally:
        os.environ.pop("HOMELAB_CACHE_DIR", None)
        if saved is not None:
            os.environ["HOMELAB_CACHE_DIR"] = saved
    out = tmp_path_factory.mktemp("cuda-src") / "llama.cpp"
    trim.trim(sdist, out)
    return out


def test_the_wheels_hold_a_whole_toolkit(kit: cuda_kit.Kit) -> None:
    done = subprocess.run([str(kit.nvcc), "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and "release 13.5" in done.stdout, done.stdout + done.stderr
    for tool in ("cudafe++", "fatbinary", "nvlink", "ptxas"):
        assert os.access(kit.root / "bin" / tool, os.X_OK), tool
    assert (kit.root / "include" / "cublas_v2.h").exists()
    assert (kit.lib / "libcublas.so").resolve().name == "libcublas.so.13"


def test_cmake_configures_and_nvcc_compiles_for_one_architecture(
    kit: cuda_kit.Kit, source: Path, tmp_path: Path
) -> None:
    build = tmp_path / "build"
    args = [*cmake_args("cuda"), *cuda_kit.cmake_kit_args(kit, None)]
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = os.pathsep.join(  # no system nvcc in the way: the kit's is named
        p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "nvcc").exists()
    )
    configure = subprocess.run(
        ["cmake", "-S", str(source), "-B", str(build), *args, "-DCMAKE_CUDA_ARCHITECTURES=86-real"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    said = configure.stdout + configure.stderr
    assert configure.returncode == 0, said[-4000:]
    assert f"Found CUDAToolkit: {kit.root}" in said and '"13.5.37"' in said
    assert "CMAKE_CUDA_ARCHITECTURES=86-real" in said
    cuda_dir = build / "ggml" / "src" / "ggml-cuda"
    compiled = subprocess.run(
        [shutil.which("make") or "make", "VERBOSE=1", "arange.o"],
        cwd=cuda_dir,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    said = compiled.stdout + compiled.stderr
    assert compiled.returncode == 0, said[-4000:]
    assert "arch=compute_86,code=[sm_86]" in said.replace('"', "")
    obj = cuda_dir / "CMakeFiles" / "ggml-cuda.dir" / "arange.cu.o"
    sections = subprocess.run(["readelf", "-S", str(obj)], capture_output=True, text=True)
    assert ".nv_fatbin" in sections.stdout  # device code for the card is in it


def test_a_binary_linked_against_the_kit_finds_its_libraries_where_it_is(
    kit: cuda_kit.Kit, tmp_path: Path
) -> None:
    """What the engine build does with cuBLAS and cudart, on a tiny CUDA program: linked
    against the wheels' libraries, run path set to them, so the copied binary loads them with
    no library path set (the driver itself is absent here: that is the one thing not found)."""
    project = tmp_path / "p"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES CXX CUDA)\n"
        "find_package(CUDAToolkit REQUIRED)\nadd_executable(p main.cu)\n"
        "target_link_libraries(p PRIVATE CUDA::cudart CUDA::cublas)\n"
    )
    (project / "main.cu").write_text(
        "#include <cublas_v2.h>\n#include <cstdio>\n"
        "__global__ void k() {}\n"
        'int main() { cublasHandle_t h; printf("%d\\n", (int)cublasCreate(&h)); return 0; }\n'
    )
    build = tmp_path / "build"
    args = [*cuda_kit.cmake_kit_args(kit, None), "-DCMAKE_CUDA_ARCHITECTURES=86-real"]
    for argv in (
        ["cmake", "-S", str(project), "-B", str(build), *args],
        ["cmake", "--build", str(build)],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    copied = tmp_path / "elsewhere" / "p"
    copied.parent.mkdir()
    shutil.copy2(build / "p", copied)  # as install_binary copies llama-server
    dynamic = subprocess.run(["readelf", "-d", str(copied)], capture_output=True, text=True)
    assert str(kit.lib) in dynamic.stdout  # RUNPATH
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    ldd = subprocess.run(["ldd", str(copied)], capture_output=True, text=True, env=env)
    for name in ("libcublas.so.13", "libcudart.so.13", "libcublasLt.so.13"):
        line = next(line for line in ldd.stdout.splitlines() if name in line)
        assert str(kit.lib) in line, line  # found in the kit, nothing system-wide
