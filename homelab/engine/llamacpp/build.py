"""Build llama-server from pinned, checksummed source, once, and cache it by version.

The llama.cpp source comes from the llama-cpp-python sdist on PyPI (it vendors
llama.cpp at ``vendor/llama.cpp``), fetched with ``pip download`` so the only
network homelab needs is the package registry. Steps: fetch the sdist into
``cache_dir()/sources`` (reused), check its sha256, extract only
``vendor/llama.cpp``, configure with CMake (Release, static, no tests, no UI
download, no OpenSSL, the RPC backend on), build the ``llama-server`` and ``ggml-rpc-server``
targets, check the server's ``--version`` and the RPC worker's ``--help``, and install both
(the worker as ``rpc-server``) atomically with a JSON manifest under ``data_dir()/engine``
(see ``homelab.engine.llamacpp.locate`` for the layout). The RPC backend is on in both: the
worker serves it, and llama-server needs it to accept ``--rpc``. Each CMake command
runs through :mod:`homelab.engine.llamacpp.build_steps`, which logs it, reads its progress and
explains its failure.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from homelab import __version__
from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.build_steps import (
    APT_TOOLCHAIN,
    BuildStepFailed,
    ProgressFn,
    diagnose,
    run_step,
)
from homelab.engine.llamacpp.cuda_build import cuda_configuration, nvidia_driver_present
from homelab.engine.llamacpp.install import engine_lock, move_into_place
from homelab.engine.llamacpp.source import (
    SDIST_FILE,
    SDIST_PACKAGE,
    SDIST_SHA256,
    SDIST_VERSION,
    extract_source,
    fetch_sdist,
)
from homelab.errors import EngineError
from homelab.gpu.report import GpuReport
from homelab.paths import cache_dir, state_dir

Variant = Literal["cpu", "cuda"]

FREE_BYTES_NEEDED = {"cpu": 1 << 30, "cuda": 6 << 30}
RPC_TARGET = "ggml-rpc-server"
"""llama.cpp's CMake target (and built file) for the RPC worker; installed as ``rpc-server``."""


def _no_progress(fraction: float | None, line: str) -> None:
    """Default progress sink: ignore."""


# --- pure parts -----------------------------------------------------------------


def resolve_variant(variant: str | None, report: GpuReport | None = None) -> Variant:
    """``cpu``/``cuda`` as asked; None picks cuda wherever an NVIDIA driver is (with the
    system's toolkit, else NVIDIA's toolkit wheels: on a machine with a card, a CPU engine is
    never built unasked), and cpu without one (a toolkit without a driver, as in CI
    containers, would build a binary that cannot start). A ``report`` (a replayed card)
    stands for the driver."""
    if variant is None:
        cards = bool(report.devices) if report is not None else nvidia_driver_present()
        return "cuda" if cards else "cpu"
    if variant not in ("cpu", "cuda"):
        raise EngineError(f"unknown engine variant {variant!r}", hint="use cpu or cuda")
    return variant  # type: ignore[return-value]


def cmake_args(variant: Variant) -> list[str]:
    """The ``-D`` options of the configure step for one variant (a CUDA build's toolkit and
    cards: :func:`~homelab.engine.llamacpp.cuda_build.cuda_configuration`)."""
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=OFF",  # one self-contained binary
        "-DGGML_NATIVE=OFF",  # portable x86-64 (AVX2/FMA/F16C), not -march=native
        "-DGGML_CCACHE=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",  # would download web UI assets at build time
        "-DLLAMA_OPENSSL=OFF",
        "-DGGML_RPC=ON",  # llama-server's --rpc, and the rpc-server worker (homelab worker)
        # the sdist carries no usable git history, so name the release explicitly
        f"-DLLAMA_BUILD_NUMBER={locate.LLAMA_CPP_BUILD_NUMBER}",
        f"-DLLAMA_BUILD_COMMIT={locate.LLAMA_CPP_COMMIT}",
    ]
    if variant == "cuda":
        args.append("-DGGML_CUDA=ON")
    return args


def build_manifest(
    *,
    variant: Variant,
    args: list[str],
    seconds: float,
    version_output: str,
    sha256: str = SDIST_SHA256,
) -> dict[str, Any]:
    """What an installed build records about itself (``manifest.json``)."""
    return {
        "engine": "llama.cpp",
        "version": locate.LLAMA_CPP_VERSION,
        "commit": locate.LLAMA_CPP_COMMIT,
        "variant": variant,
        "source": {
            "package": SDIST_PACKAGE,
            "version": SDIST_VERSION,
            "file": SDIST_FILE,
            "sha256": sha256,
        },
        "cmake_args": args,
        "build_seconds": round(seconds, 1),
        "version_output": version_output.strip(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "built_by": f"homelab {__version__}",
    }


def install_binary(
    built: Path, manifest: dict[str, Any], dest: Path, *, companions: dict[str, Path] | None = None
) -> Path:
    """Copy ``built`` to ``dest/bin/llama-server`` (and each of ``companions``, name -> built
    file, beside it) with ``dest/manifest.json``; the folder appears complete or not at all
    (staged beside it, then renamed into place)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.staging-", dir=dest.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the engine is for every user
        (staging / "bin").mkdir()
        for name, path in {"llama-server": built, **(companions or {})}.items():
            shutil.copy2(path, staging / "bin" / name)
            os.chmod(staging / "bin" / name, 0o755)
        (staging / locate.MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
        move_into_place(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return dest / "bin" / "llama-server"


# --- steps that touch the world ---------------------------------------------------


def check_toolchain() -> None:
    """cmake, make and a C/C++ compiler must be there (CUDA's comes as wheels when missing)."""
    if not shutil.which("cmake"):
        raise EngineError("cmake not found", hint=APT_TOOLCHAIN, title="Build tools missing")
    if not (shutil.which("make") or shutil.which("ninja")):
        raise EngineError("make not found", hint=APT_TOOLCHAIN, title="Build tools missing")
    for env, names in (("CC", ("cc", "gcc", "clang")), ("CXX", ("c++", "g++", "clang++"))):
        if not (os.environ.get(env) or any(shutil.which(n) for n in names)):
            raise EngineError(
                f"no {'C++' if env == 'CXX' else 'C'} compiler found "
                f"(looked for {', '.join(names)})",
                hint=APT_TOOLCHAIN,
                title="Build tools missing",
            )


def check_free_space(folder: Path, variant: Variant) -> None:
    """EngineError when ``folder``'s disk has less room than a build needs."""
    free = shutil.disk_usage(folder).free
    if free < FREE_BYTES_NEEDED[variant]:
        raise EngineError(
            f"only {free / 2**30:.1f} GiB free at {folder}; building the {variant} engine "
            f"needs {FREE_BYTES_NEEDED[variant] / 2**30:.0f} GiB",
            hint="free some disk space, or point HOMELAB_CACHE_DIR at a larger disk",
            title="No disk space",
        )


def build_llama_server(
    *,
    variant: str | None = None,
    jobs: int | None = None,
    progress: ProgressFn | None = None,
    force: bool = False,
    card: GpuReport | None = None,
) -> Path:
    """Build (or find already built) the pinned llama-server; returns the binary's path.

    ``card``: the machine's cards as NVML reports them (None: read them here when a CUDA
    build needs to know); a replayed snapshot stands for the live driver."""
    report = progress or _no_progress
    chosen = resolve_variant(variant, card)
    name = locate.install_dir(chosen).name
    with engine_lock(name, report, "waiting for another homelab engine build to finish"):
        existing = locate.cached_build(chosen)
        if existing is not None and not force:
            report(1.0, f"already built: {existing}")
            return existing
        check_toolchain()
        work = cache_dir() / "build" / name
        work.mkdir(parents=True, exist_ok=True)
        check_free_space(work, chosen)
        log_path = state_dir() / "logs" / f"engine-build-{name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return _build(chosen, jobs or os.cpu_count() or 1, work, log_path, report, card)
        except BuildStepFailed as failed:
            error = diagnose(*failed.args)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise EngineError(
                    f"building llama-server failed: {exc}", hint=f"full log: {log_path}"
                ) from None
            error = diagnose("writing files", "No space left on device")
        error.message += f"\nfull log: {log_path}"
        raise error


def _build(
    variant: Variant,
    jobs: int,
    work: Path,
    log_path: Path,
    report: ProgressFn,
    card: GpuReport | None,
) -> Path:
    """The build proper, inside the lock: fetch, extract, configure, compile, check, install."""
    cuda = cuda_configuration(card or _live_card(), report) if variant == "cuda" else None
    started = time.monotonic()
    archive = fetch_sdist(report)
    source = work / "src"
    if not (source / "CMakeLists.txt").exists():
        report(None, f"extracting llama.cpp {locate.LLAMA_CPP_VERSION} source")
        extract_source(archive, source)
    args = [*cmake_args(variant), *(cuda.args if cuda else [])]
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    build_dir = work / "build"
    with log_path.open("w", encoding="utf-8") as log:
        built_for = cuda.summary if cuda else "CPU"
        report(None, f"configuring llama.cpp {locate.LLAMA_CPP_VERSION} ({built_for}) with cmake")
        run_step(
            "cmake configure",
            [*nice, "cmake", "-S", str(source), "-B", str(build_dir), *args],
            log,
            report,
        )
        report(0.0, f"compiling llama-server and rpc-server with {jobs} jobs (log: {log_path})")
        run_step(
            "cmake build",
            [
                *nice,
                "cmake",
                "--build",
                str(build_dir),
                "--config",
                "Release",
                "--target",
                "llama-server",
                RPC_TARGET,
                "-j",
                str(jobs),
            ],
            log,
            _with_time_left(report),
        )
    built = build_dir / "bin" / "llama-server"
    output = locate.run_version(built) or ""
    parsed = locate.parse_version_output(output)
    if parsed is None or parsed.build != locate.LLAMA_CPP_BUILD_NUMBER:
        raise EngineError(
            f"the freshly built {built} does not report build "
            f"{locate.LLAMA_CPP_BUILD_NUMBER}; `--version` said:\n{output.strip()}",
            hint=f"full log: {log_path}",
        )
    worker = build_dir / "bin" / RPC_TARGET
    usage = locate.run_help(worker) or ""
    if not locate.looks_like_rpc_server(usage):
        raise EngineError(
            f"the freshly built {worker} does not answer `--help` like llama.cpp's rpc-server; "
            f"it said:\n{usage.strip()[:400]}",
            hint=f"full log: {log_path}",
        )
    manifest = build_manifest(
        variant=variant, args=args, seconds=time.monotonic() - started, version_output=output
    )
    if cuda is not None:
        manifest["cuda"] = cuda.manifest
    installed = install_binary(
        built, manifest, locate.install_dir(variant), companions={locate.RPC_SERVER: worker}
    )
    shutil.rmtree(work, ignore_errors=True)
    report(1.0, f"installed {installed} in {manifest['build_seconds']:.0f} s")
    return locate.binary_path(variant)


def _live_card() -> GpuReport | None:
    """The cards as NVML reports them now (one quick sample), or None when it cannot say."""
    from homelab.errors import GpuProbeError
    from homelab.gpu.probe import probe

    try:
        return probe(window_s=0.0)
    except GpuProbeError:
        return None


def _with_time_left(report: ProgressFn) -> ProgressFn:
    """``report`` with the time the compile has left, from its pace so far (a CUDA build's
    length depends on the cards and the cores: measured, not guessed)."""
    started = time.monotonic()

    def progress(fraction: float | None, line: str) -> None:
        if fraction is not None and fraction >= 0.05:
            left = (time.monotonic() - started) * (1 - fraction) / fraction
            line = f"{line} (about {max(1, round(left / 60))} min left)"
        report(fraction, line)

    return progress
