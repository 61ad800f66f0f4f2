"""What a CUDA build of llama-server is configured with: which toolkit, which cards.

The toolkit is the system's when it is whole (nvcc with cuBLAS beside it), else NVIDIA's
wheels (:mod:`homelab.engine.llamacpp.cuda_kit`), which need a CUDA 13 driver and a card of
compute capability 7.5 or newer: :func:`cuda_configuration` says so before anything is
downloaded, with the ways out. The device code is built for the cards NVML reports only
(``CMAKE_CUDA_ARCHITECTURES=86-real``), not llama.cpp's default list of eight
architectures: that is most of a CUDA build's time. ``HOMELAB_CUDA_ARCHITECTURES`` builds
for other cards (another machine's, or here where NVML cannot say).
"""

from __future__ import annotations

import ctypes.util
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homelab.engine.llamacpp import cuda_kit
from homelab.engine.llamacpp.build_steps import ProgressFn
from homelab.errors import EngineError
from homelab.gpu.report import GpuReport

ARCH_ENV = "HOMELAB_CUDA_ARCHITECTURES"
OLD_DRIVER_WAYS_OUT = (
    "fetch the prebuilt engine, which runs on CUDA 12 drivers: homelab engine fetch; or "
    "update the NVIDIA driver (the 580 series or later); or install a CUDA toolkit with "
    "cuBLAS system-wide"
)


@dataclass(frozen=True)
class CudaConfiguration:
    """The configure options of one CUDA build and what its manifest records of them."""

    args: list[str]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """``CUDA 13.5.37 (toolkit wheels) for sm_86``, for the progress line."""
        archs = self.manifest["architectures"]
        if archs != "native":
            archs = ", ".join(f"sm_{a.split('-')[0]}" for a in archs.split(";"))
        version = self.manifest["version"]
        toolkit = "toolkit wheels" if self.manifest["toolkit"] == "wheels" else "system toolkit"
        return f"CUDA{f' {version}' if version else ''} ({toolkit}) for {archs}"


def find_nvcc() -> str | None:
    """The CUDA compiler: on PATH, else under $CUDA_HOME or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(Path(root, "bin", "nvcc"), os.X_OK):
            return str(Path(root, "bin", "nvcc"))
    return None


def nvidia_driver_present() -> bool:
    """True when an NVIDIA kernel driver (or at least its user library) is installed."""
    if Path("/proc/driver/nvidia/version").exists():
        return True
    return ctypes.util.find_library("cuda") is not None


def system_toolkit() -> str | None:
    """The system's nvcc when its toolkit is whole enough for llama.cpp (cuBLAS's headers
    beside it), else None: the build then uses the toolkit wheels."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None
    root = Path(nvcc).resolve().parent.parent
    headers = [root / "include", *root.glob("targets/*/include")]
    return nvcc if any((folder / "cublas_v2.h").exists() for folder in headers) else None


def architectures(report: GpuReport | None) -> str:
    """``CMAKE_CUDA_ARCHITECTURES`` for this machine's cards (see the module docstring).

    Raises:
        EngineError: no card says what it is and none is named in :data:`ARCH_ENV`.
    """
    named = os.environ.get(ARCH_ENV, "").strip()
    if named:
        return named
    devices = report.devices if report is not None else ()
    known = cuda_kit.cuda_architectures(tuple(d.compute_capability for d in devices))
    if known is not None:
        return known
    if nvidia_driver_present():
        return "native"  # CMake asks the cards themselves
    raise EngineError(
        "a CUDA build needs to know which card it is for, and no NVIDIA card answers here",
        hint=f"name it: {ARCH_ENV}=86-real (a 3090; 89-real a 40-series card), "
        "or build for the CPU: homelab engine build --cpu",
        title="No card to build for",
    )


def cuda_configuration(report: GpuReport | None, progress: ProgressFn) -> CudaConfiguration:
    """The toolkit (installing the wheels when the system has none) and the cards to build for.

    Raises:
        EngineError: the wheels' CUDA 13 cannot serve this driver or card (with the ways
            out), they could not be installed, or there is no card to build for.
    """
    nvcc = system_toolkit()
    if nvcc is None and report is not None:
        refusal = cuda_kit.kit_refusal(
            report.cuda_driver, tuple(d.compute_capability for d in report.devices)
        )
        if refusal is not None:
            raise EngineError(refusal, hint=OLD_DRIVER_WAYS_OUT, title="CUDA 13 not possible")
    archs = architectures(report)
    if nvcc is not None:
        args = [f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
        manifest: dict[str, Any] = {
            "toolkit": "system",
            "nvcc": nvcc,
            "version": None,
            "architectures": archs,
        }
        return CudaConfiguration(args, manifest)
    kit = cuda_kit.ensure_kit(progress)
    driver = cuda_kit.driver_library()
    if driver is not None:
        cuda_kit.link_driver(kit, driver)
    args = [*cuda_kit.cmake_kit_args(kit, driver), f"-DCMAKE_CUDA_ARCHITECTURES={archs}"]
    manifest = {  # same keys as above, for the wheels
        "toolkit": "wheels",
        "version": cuda_kit.KIT_VERSION,
        "kit": str(kit.root),
        "libraries": str(kit.lib),
        "architectures": archs,
        "vmm": driver is not None,
    }
    return CudaConfiguration(args, manifest)
