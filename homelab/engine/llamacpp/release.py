"""Fetch llama.cpp's official prebuilt release of the pinned build, verified, into homelab's
engine folder: a GPU engine without a CUDA toolkit or a compile.

What ggml-org publishes for each build (their ``.github/workflows/release.yml`` at b11312):
for Linux x86-64, ``llama-{tag}-bin-ubuntu-cuda-{13.4,12.8}-x64.tar.gz`` and
``llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz``: ``build/bin`` of a build with
``GGML_BACKEND_DL=ON`` (each backend a ``libggml-*.so`` loaded at start), ``GGML_RPC=ON``
(llama-server takes ``--rpc``; the worker is ``ggml-rpc-server``) and ``$ORIGIN`` as rpath
(the libraries are found beside the binaries). Each CUDA archive has a runtime archive,
``cudart-llama-{tag}-bin-ubuntu-cuda-{label}-x64.tar.gz``, holding ``libcudart.so.<major>``,
``libcublas.so.<major>`` and ``libcublasLt.so.<major>``, meant to be extracted next to the
binaries. Every archive holds its files under one top folder (``llama-{tag}/``,
``cudart-llama-...-x64/``). The CUDA builds are made in Ubuntu 24.04 containers, the Vulkan
one on Ubuntu 22.04, so a system with an older C library may not run them.

A fetch: choose the flavour from the driver (:func:`choose_flavour`), list the release's
assets, download and verify each (:mod:`homelab.engine.llamacpp.release_fetch`, cached in
``cache_dir()/releases``), unpack them all into one staging folder's ``bin/`` (no member
may leave it), check that the binary answers ``--version`` with the pinned build, write
``manifest.json`` and rename the folder into place as :func:`~homelab.engine.llamacpp.locate.release_dir`.
"""

from __future__ import annotations

import ctypes.util
import errno
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from homelab import __version__
from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.build_steps import ProgressFn
from homelab.engine.llamacpp.cuda_kit import parse_cuda_version
from homelab.engine.llamacpp.install import engine_lock, move_into_place
from homelab.engine.llamacpp.release_fetch import (
    BUILD_INSTEAD,
    Asset,
    download,
    missing_asset,
    no_digest,
    open_client,
    release_assets,
)
from homelab.engine.llamacpp.release_unpack import unpack
from homelab.errors import EngineError
from homelab.paths import cache_dir

VULKAN_LOADER = "libvulkan.so.1"
RPC_WORKER = "ggml-rpc-server"
"""The release's name for the RPC worker; homelab finds it as ``rpc-server`` (a link to it)."""
UNPACK_FACTOR = 3
"""Disk room to keep for unpacking, as a multiple of the archives' size (an estimate, on the
generous side for compiled libraries)."""


def asset_names(flavour: locate.ReleaseFlavour) -> tuple[str, ...]:
    """The release files one flavour needs: the engine's archive, and CUDA's runtime one."""
    tag = locate.LLAMA_CPP_VERSION
    if flavour == "vulkan":
        return (f"llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz",)
    label = flavour.removeprefix("cuda-")
    return (
        f"llama-{tag}-bin-ubuntu-cuda-{label}-x64.tar.gz",
        f"cudart-llama-{tag}-bin-ubuntu-cuda-{label}-x64.tar.gz",
    )


def choose_flavour(
    cuda_driver: str | None = None, *, has_card: bool = True, flavour: str | None = None
) -> locate.ReleaseFlavour:
    """Which prebuilt engine suits this machine, or ``flavour`` when a person forces one.

    ``cuda_driver`` is the CUDA version the NVIDIA driver supports (NVML's, e.g. ``"13.1"``).
    CUDA's minor-version compatibility lets a runtime of release 13.x run on any 13.x driver
    (12.x likewise), so 13.0 and newer take the CUDA 13.4 build and 12.x the 12.8 one. An
    older or unknown driver on a card takes the Vulkan build (the NVIDIA driver brings the
    Vulkan driver). Without a card there is nothing to fetch a GPU engine for (the CPU
    build is ``homelab engine build --cpu``). A forced flavour is taken as asked, card or
    not (a card NVML cannot see, such as another vendor's, may still run Vulkan).

    Raises:
        EngineError: an unknown forced flavour, or no card and none forced.
    """
    if flavour is not None:
        if flavour not in locate.RELEASE_FLAVOURS:
            raise EngineError(
                f"unknown release flavour {flavour!r}",
                hint=f"use one of {', '.join(locate.RELEASE_FLAVOURS)}",
                title="Unknown flavour",
            )
        return flavour
    if not has_card:
        raise EngineError(
            "this machine has no NVIDIA card, so a prebuilt GPU engine would not use one",
            hint="build the CPU engine: `homelab engine build --cpu` (or force a flavour)",
            title="No GPU for a GPU engine",
        )
    version = parse_cuda_version(cuda_driver)
    if version is not None and version >= (13, 0):
        return "cuda-13.4"
    if version is not None and version >= (12, 0):
        return "cuda-12.8"
    return "vulkan"


def vulkan_loader_present() -> bool:
    """Is the system's Vulkan loader (``libvulkan.so.1``) installed, which the Vulkan build
    loads its backend through?"""
    return ctypes.util.find_library("vulkan") is not None


def release_manifest(flavour: locate.ReleaseFlavour, assets: list[Asset]) -> dict[str, Any]:
    """What a fetched release records about itself (``manifest.json``)."""
    return {
        "engine": "llama.cpp",
        "version": locate.LLAMA_CPP_VERSION,
        "commit": locate.LLAMA_CPP_COMMIT,
        "origin": "release",
        "flavour": flavour,
        "assets": [{"name": a.name, "sha256": a.sha256} for a in assets],
        "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "fetched_by": f"homelab {__version__}",
    }


def fetch_release(
    *,
    flavour: str | None = None,
    cuda_driver: str | None = None,
    has_card: bool = True,
    progress: ProgressFn | None = None,
    force: bool = False,
) -> Path:
    """Fetch (or find already fetched) the pinned prebuilt llama-server; its path.

    ``cuda_driver`` and ``has_card`` describe the machine (see :func:`choose_flavour`);
    ``flavour`` forces one. ``force`` installs again even when the folder is complete
    (from the cached, verified downloads when they are there).

    Raises:
        EngineError: for every failure, with the next step (never another exception).
    """
    report: ProgressFn = progress or (lambda _fraction, _line: None)
    chosen = choose_flavour(cuda_driver, has_card=has_card, flavour=flavour)
    try:
        with engine_lock(
            "release-fetch", report, "waiting for another homelab release fetch to finish"
        ):
            existing = locate.cached_release(chosen)
            if existing is not None and not force:
                report(1.0, f"already fetched: {existing}")
                return existing
            _check_machine(chosen)
            return _fetch(chosen, report)
    except OSError as problem:
        raise _disk_error(problem) from None


def _check_machine(flavour: locate.ReleaseFlavour) -> None:
    """EngineError unless this machine can run the release's Linux x86-64 ``flavour`` build."""
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "amd64"):
        raise EngineError(
            f"llama.cpp's prebuilt Linux engines are for x86-64; this is {sys.platform} "
            f"on {machine or 'an unknown processor'}",
            hint="build the engine here: `homelab engine build`",
            title="No prebuilt engine for this machine",
        )
    if flavour == "vulkan" and not vulkan_loader_present():
        raise EngineError(
            f"the Vulkan build needs the system's Vulkan loader ({VULKAN_LOADER}), "
            "which is not installed",
            hint="install it (Debian/Ubuntu: `sudo apt-get install libvulkan1`) and run it "
            "again, or force a CUDA flavour if the driver is new enough",
            title="Vulkan loader missing",
        )


def _fetch(flavour: locate.ReleaseFlavour, report: ProgressFn) -> Path:
    """The fetch proper, inside the lock: list, download, unpack, check, install."""
    tag = locate.LLAMA_CPP_VERSION
    folder = cache_dir() / "releases"
    folder.mkdir(parents=True, exist_ok=True)
    report(None, f"asking for llama.cpp {tag}'s prebuilt {flavour} engine")
    with open_client() as client:
        listed = release_assets(client, tag)
        wanted = []
        for name in asset_names(flavour):
            if name not in listed:
                raise missing_asset(name, tag)
            if listed[name].sha256 is None:
                raise no_digest(listed[name])
            wanted.append(listed[name])
        _check_free_space(folder, wanted)
        total = sum(a.size for a in wanted)
        archives, before = [], 0
        for asset in wanted:
            archives.append(download(client, asset, folder, report, span=(before, total)))
            before += asset.size
    dest = locate.release_dir(flavour)
    report(None, f"unpacking into {dest}")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    try:
        _stage(staging, archives, flavour, wanted)
        move_into_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    report(1.0, f"installed {dest / 'bin' / 'llama-server'}")
    return dest / "bin" / "llama-server"


def _check_free_space(folder: Path, assets: list[Asset]) -> None:
    """EngineError when a disk cannot take what is still to download (into ``folder``) or
    the unpacked engine (into the engine folder; both count when they share a disk)."""
    to_download = sum(a.size for a in assets if not (folder / a.name).exists())
    unpacked = UNPACK_FACTOR * sum(a.size for a in assets)
    root = locate.engine_root()
    checks = [(folder, to_download, "HOMELAB_CACHE_DIR"), (root, unpacked, "HOMELAB_DATA_DIR")]
    if folder.stat().st_dev == root.stat().st_dev:  # one disk takes both
        checks = [(root, to_download + unpacked, "HOMELAB_DATA_DIR or HOMELAB_CACHE_DIR")]
    for place, needed, setting in checks:
        free = shutil.disk_usage(place).free
        if free < needed:
            raise EngineError(
                f"only {free / 2**30:.1f} GiB free at {place}; fetching the prebuilt engine "
                f"needs about {needed / 2**30:.1f} GiB there",
                hint=f"free some disk space, or point {setting} at a larger disk",
                title="No disk space",
            )


def _stage(
    staging: Path, archives: list[Path], flavour: locate.ReleaseFlavour, assets: list[Asset]
) -> None:
    """Fill ``staging``: every archive into ``bin/``, the version checked, the manifest."""
    staging.chmod(0o755)  # mkdtemp makes it private; the engine is for every user
    bin_dir = staging / "bin"
    bin_dir.mkdir()
    for archive in archives:
        unpack(archive, bin_dir)
    binary = bin_dir / "llama-server"
    if not locate.is_executable_file(binary):
        raise EngineError(
            f"{archives[0].name} holds no executable llama-server",
            hint=f"delete {archives[0]} and run it again; {BUILD_INSTEAD}",
            title="Not a llama.cpp release",
        )
    _check_version(binary)
    worker = bin_dir / RPC_WORKER
    if locate.is_executable_file(worker) and not (bin_dir / locate.RPC_SERVER).exists():
        (bin_dir / locate.RPC_SERVER).symlink_to(RPC_WORKER)
    manifest = release_manifest(flavour, assets)
    text = json.dumps(manifest, indent=2) + "\n"
    (staging / locate.MANIFEST_NAME).write_text(text, "utf-8")


def _check_version(binary: Path) -> None:
    """EngineError unless ``binary --version`` names the pinned build number."""
    output = locate.run_version(binary) or ""
    parsed = locate.parse_version_output(output)
    if parsed is not None and parsed.build == locate.LLAMA_CPP_BUILD_NUMBER:
        return
    said = " / ".join(output.strip().splitlines()[:3]) or "nothing"
    if "GLIBC_" in output:
        hint = (
            "this system's C library is older than the one the release was built with "
            f"(Ubuntu 24.04 for CUDA, 22.04 for Vulkan); {BUILD_INSTEAD}"
        )
    else:
        hint = f"the release is not the pinned build; {BUILD_INSTEAD}"
    raise EngineError(
        f"the fetched llama-server does not answer `--version` with build "
        f"{locate.LLAMA_CPP_BUILD_NUMBER}; it said: {said}",
        hint=hint,
        title="Wrong engine version",
    )


def _disk_error(problem: OSError) -> EngineError:
    """The error for a file operation that failed while fetching (a full disk named as such)."""
    if problem.errno == errno.ENOSPC:
        return EngineError(
            "the disk filled up while fetching the prebuilt engine",
            hint="free some disk space, or point HOMELAB_CACHE_DIR at a larger disk",
            title="No disk space",
        )
    return EngineError(
        f"fetching the prebuilt engine failed: {problem}",
        hint="check that homelab's data and cache folders are writable, then run it again",
        title="Release fetch failed",
    )
