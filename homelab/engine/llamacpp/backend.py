"""Which compute backend a llama-server binary has, and the refusal to run a card's plan
on a binary that has none.

llama-server names its devices by backend (``CUDA0``, ``Vulkan0``, ``RPC0``; llama.cpp's
``common_print_available_devices``). A build without a GPU backend lists none of the GPU
ones, and then runs whatever ``-ngl`` asks for on the CPU, silently, at a fraction of the
speed: a plan made for the card would be a lie. So where a plan puts weights on a card
that NVML reports (live or replayed), :func:`check_gpu_backend` refuses such a binary with
the ways out; a plan made for system RAM (``--cpu``, or no card) never asks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.visible_devices import listed_devices
from homelab.errors import EngineError

GPU_BACKENDS = ("CUDA", "Vulkan")
"""The device name prefixes of the backends that run on an NVIDIA card."""
ALLOW_ENV = "HOMELAB_ALLOW_CPU_ENGINE"
"""Set to 1, a card's plan runs on a binary without a GPU backend anyway. For test rigs
without a GPU (homelab's own suite replays recorded cards on its CPU build); the numbers
such a run shows are not the card's."""
WAYS_OUT = (
    "fetch the prebuilt CUDA engine (`homelab engine fetch`, seconds), or build it "
    "(`homelab engine build --cuda`: NVIDIA's toolkit wheels, no system CUDA needed), or run "
    "on the CPU on purpose with --cpu (a plan for system RAM)"
)
_NAME = re.compile(r"^([A-Za-z]+)\d+$")


class NoGpuBackend(EngineError):
    """There is a llama-server, but it lists no GPU device where a card is to be used."""

    title = "No GPU backend"


@dataclass(frozen=True)
class Backend:
    """What a binary computes on: its GPU devices (``CUDA0: NVIDIA GeForce RTX 3090``) and,
    for homelab's own build, what it was built for (manifest)."""

    devices: tuple[str, ...]
    """``NAME: DESCRIPTION`` of each GPU device it lists, in its order."""
    built_for: str | None = None
    """``CUDA 13.5.37, sm_86`` for a homelab CUDA build, ``CPU`` for its CPU build."""

    @property
    def gpu(self) -> bool:
        return bool(self.devices)

    def describe(self) -> str:
        """One line: ``CUDA (CUDA0: NVIDIA GeForce RTX 3090; built for CUDA 13.5.37, sm_86)``."""
        kinds = sorted({_kind(d.split(":", 1)[0]) for d in self.devices})
        head = "/".join(kinds) if kinds else "CPU only (no GPU device)"
        parts = [*self.devices, *([f"built for {self.built_for}"] if self.built_for else [])]
        return f"{head} ({'; '.join(parts)})" if parts else head


def _kind(name: str) -> str:
    match = _NAME.match(name)
    return match.group(1) if match else name


def gpu_device(name: str) -> bool:
    """Is ``CUDA0``/``Vulkan1``/... a device of a GPU backend (not ``RPC0``, not ``CPU``)?"""
    return _kind(name) in GPU_BACKENDS


def backend_of(executable: Path) -> Backend | None:
    """The binary's backend from its own ``--list-devices``; None when it cannot be asked."""
    listed = listed_devices(str(executable))
    if listed is None:
        return None
    devices = tuple(line for line in listed if gpu_device(line.split(":", 1)[0]))
    return Backend(devices, _built_for(executable))


def _built_for(executable: Path) -> str | None:
    """What homelab's manifest beside the binary says it is, when it is homelab's own."""
    for flavour in locate.RELEASE_FLAVOURS:
        if locate.cached_release(flavour) == executable:
            return f"the official {flavour.replace('cuda-', 'CUDA ')} release"
    if locate.binary_path("cpu") == executable:
        return "CPU"
    if locate.binary_path("cuda") != executable:
        return None
    manifest = locate.read_manifest("cuda") or {}
    cuda = manifest.get("cuda")
    cuda = cuda if isinstance(cuda, dict) else {}
    archs = str(cuda.get("architectures") or "")
    sms = ", ".join(f"sm_{a.split('-')[0]}" for a in archs.split(";") if a and a != "native")
    toolkit = "toolkit wheels" if cuda.get("toolkit") == "wheels" else "system toolkit"
    version = f"CUDA {cuda['version']}" if cuda.get("version") else "CUDA"
    return ", ".join(p for p in (f"{version} ({toolkit})", sms) if p)


def check_gpu_backend(executable: Path) -> None:
    """Refuse ``executable`` for a card's plan when it lists no GPU device.

    Raises:
        NoGpuBackend: it lists devices and none is CUDA or Vulkan (not raised when it could not
            be asked: the start then says what is wrong, nor when :data:`ALLOW_ENV` is 1).
    """
    if os.environ.get(ALLOW_ENV) == "1":
        return
    backend = backend_of(executable)
    if backend is None or backend.gpu:
        return
    raise NoGpuBackend(
        f"this llama-server has no GPU backend: it would run on the CPU ({executable}, "
        f"{backend.describe()})",
        hint=WAYS_OUT,
    )
