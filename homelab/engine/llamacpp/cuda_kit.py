"""A CUDA toolkit for building llama-server, from NVIDIA's wheels on the package registry.

Most people with an NVIDIA card have its driver and no CUDA toolkit. NVIDIA publishes the
toolkit's parts as wheels; the CUDA 13 set carries the whole compiler driver (``nvcc``,
``cudafe++``, ``fatbinary``, ``nvlink``, ``ptxas``, ``cicc``), the headers, cuBLAS and the
runtime, all under ``nvidia/cu13`` in one layout nvcc's own ``nvcc.profile`` understands.
(The CUDA 12 wheels carry only ``ptxas``: no CUDA 12 source build this way.)

:func:`ensure_kit` installs the pinned set with ``pip install --target`` into a versioned
folder under ``data_dir()/cuda`` (nothing system-wide is touched), complete or not at all,
and adds the unversioned ``libcudart.so``/``libcublas.so``/``libcublasLt.so`` names CMake's
``FindCUDAToolkit`` links by. The build then points CMake at it (:func:`cmake_kit_args`)
and records the library folder as the binary's run path, so the engine finds the wheels'
runtime libraries wherever it runs from.

CUDA 13 asks two things of the machine (:func:`kit_refusal`): a driver of the 580 series or
later (NVML's CUDA driver version 13.0 or newer) and a card of compute capability 7.5 or
newer (Turing on); CUDA 13 dropped the older ones.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from homelab.engine.llamacpp.build_steps import ProgressFn
from homelab.errors import EngineError
from homelab.paths import data_dir

KIT_VERSION = "13.5.37"
"""The CUDA release of the kit: the nvcc wheel's version."""
KIT_PACKAGES = (
    f"nvidia-cuda-nvcc=={KIT_VERSION}",
    f"nvidia-cuda-crt=={KIT_VERSION}",
    f"nvidia-nvvm=={KIT_VERSION}",
    f"nvidia-cuda-runtime=={KIT_VERSION}",
    f"nvidia-cuda-nvrtc=={KIT_VERSION}",
    "nvidia-cuda-cccl==13.3.5.0.6",
    "nvidia-cublas==13.10.0.20",
)
"""The exact set (installed with ``--no-deps``, so nothing else comes with it)."""
KIT_BYTES = 1_200_000_000
"""About what the installed kit takes on disk (1.1 GB measured, cuBLASLt 0.55 GB of it)."""
MIN_DRIVER_CUDA = (13, 0)
MIN_CAPABILITY = (7, 5)
_LINKED_NAMES = ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13")


@dataclass(frozen=True)
class Kit:
    """An installed toolkit: ``root`` is the folder nvcc's profile calls TOP."""

    root: Path

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def lib(self) -> Path:
        """The runtime libraries (cudart, cuBLAS): the engine's run path."""
        return self.root / "lib"


def kit_dir(version: str = KIT_VERSION) -> Path:
    """Where the kit of ``version`` is installed."""
    return data_dir() / "cuda" / f"cuda-{version}-wheels"


def installed_kit(version: str = KIT_VERSION) -> Kit | None:
    """The complete kit of ``version``, or None when it is not installed."""
    kit = Kit(kit_dir(version) / "nvidia" / "cu13")
    if os.access(kit.nvcc, os.X_OK) and all((kit.lib / n[:-3]).exists() for n in _LINKED_NAMES):
        return kit
    return None


def parse_cuda_version(text: str | None) -> tuple[int, int] | None:
    """``"13.0"`` -> (13, 0); None for None or text that is not a version."""
    if not text:
        return None
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def kit_refusal(
    cuda_driver: str | None, capabilities: tuple[tuple[int, int] | None, ...]
) -> str | None:
    """Why the CUDA 13 kit cannot build an engine this machine runs, or None when it can.

    ``cuda_driver`` is NVML's CUDA driver version (``"12.4"``); ``capabilities`` the cards'
    compute capabilities (None where NVML did not say). Unknown is not a refusal.
    """
    driver = parse_cuda_version(cuda_driver)
    if driver is not None and driver < MIN_DRIVER_CUDA:
        return (
            f"this NVIDIA driver supports CUDA {cuda_driver}; the CUDA 13 toolkit homelab "
            "installs needs CUDA 13.0 or newer (a driver of the 580 series or later)"
        )
    old = sorted({c for c in capabilities if c is not None and c < MIN_CAPABILITY})
    if old:
        named = ", ".join(f"{major}.{minor}" for major, minor in old)
        return (
            f"CUDA 13 builds for cards of compute capability 7.5 or newer; this machine has {named}"
        )
    return None


def cuda_architectures(capabilities: tuple[tuple[int, int] | None, ...]) -> str | None:
    """``CMAKE_CUDA_ARCHITECTURES`` for exactly these cards (``"86-real;89-real"``): device
    code for each card's own architecture only, which is what makes the build several
    times shorter than llama.cpp's default list. None when a capability is unknown."""
    known = [c for c in capabilities if c is not None]
    if not known or len(known) != len(capabilities):
        return None
    return ";".join(f"{major}{minor}-real" for major, minor in sorted(set(known)))


def driver_library() -> Path | None:
    """The driver's ``libcuda.so.1``, which the engine links for CUDA's virtual memory
    management (the wheels carry no stub of it); None on a machine without the driver."""
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib", "/usr/lib"):
        candidate = Path(folder) / "libcuda.so.1"
        if candidate.exists():
            return candidate
    try:  # elsewhere: where the dynamic loader's cache says
        listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listed.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith("libcuda.so.1 ") and Path(where).exists():
            return Path(where)
    return None


def cmake_kit_args(kit: Kit, driver: Path | None) -> list[str]:
    """The configure options that build against ``kit``: its nvcc and libraries and the run
    path to them; without the driver's library (:func:`link_driver`), no VMM."""
    args = [
        f"-DCMAKE_CUDA_COMPILER={kit.nvcc}",
        f"-DCUDAToolkit_ROOT={kit.root}",
        f"-DCMAKE_BUILD_RPATH={kit.lib}",
    ]
    return args if driver is not None else [*args, "-DGGML_CUDA_NO_VMM=ON"]


def link_driver(kit: Kit, driver: Path) -> None:
    """Put the driver's ``libcuda.so.1`` where CMake's ``FindCUDAToolkit`` looks for
    ``CUDA::cuda_driver`` (``lib/stubs/libcuda.so``), replacing an older link."""
    stubs = kit.lib / "stubs"
    stubs.mkdir(exist_ok=True)
    link = stubs / "libcuda.so"
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    link.symlink_to(driver)


def ensure_kit(progress: ProgressFn, version: str = KIT_VERSION) -> Kit:
    """The installed kit, installing it first when it is not there (about 1.1 GB).

    Raises:
        EngineError: the disk is too small, or pip could not install the set (offline, the
            registry refused): said with what pip said, nothing half-installed left.
    """
    found = installed_kit(version)
    if found is not None:
        return found
    dest = kit_dir(version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if free < KIT_BYTES:
        raise EngineError(
            f"only {free / 2**30:.1f} GiB free at {dest.parent}; the CUDA toolkit wheels need "
            f"about {KIT_BYTES / 2**30:.1f} GiB",
            hint="free some disk space, or point HOMELAB_DATA_DIR at a larger disk",
            title="No disk space",
        )
    progress(None, f"installing the CUDA {version} toolkit from NVIDIA's wheels (~1.1 GB, once)")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    try:
        _pip_install(staging)
        kit = Kit(staging / "nvidia" / "cu13")
        for name in _LINKED_NAMES:
            (kit.lib / name[:-3]).symlink_to(name)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    installed = installed_kit(version)
    if installed is None:
        raise EngineError(
            f"the CUDA toolkit wheels installed into {dest} but nvcc or cuBLAS is missing there",
            hint=f"remove {dest} and run it again",
        )
    progress(None, f"CUDA {version} toolkit ready at {installed.root}")
    return installed


def _pip_install(target: Path) -> None:
    """``pip install --target`` the pinned set; EngineError with pip's last lines on failure."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile"]
    argv += ["--disable-pip-version-check", "--target", str(target), *KIT_PACKAGES]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=3600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EngineError(f"could not run pip to install the CUDA toolkit: {exc}") from None
    if done.returncode != 0:
        said = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        raise EngineError(
            "pip could not install the CUDA toolkit wheels:\n" + "\n".join(said[-6:]),
            hint="check the network and the package registry (pip's index); "
            "or fetch the prebuilt engine: homelab engine fetch",
            title="CUDA toolkit not installed",
        )
    missing = [n for n in _LINKED_NAMES if not (target / "nvidia" / "cu13" / "lib" / n).exists()]
    if missing or not (target / "nvidia" / "cu13" / "bin" / "nvcc").exists():
        raise EngineError(
            "the CUDA toolkit wheels installed but do not hold " + ", ".join(missing or ["nvcc"]),
            hint="the registry's wheels are not the ones homelab pins; report it",
        )
