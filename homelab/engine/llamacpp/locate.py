"""Which llama-server homelab runs, and where homelab's own builds live.

Resolution order of :func:`find_llama_server`:

1. ``HOMELAB_LLAMA_SERVER`` (a path; it must exist and be executable),
2. the binary a front-end was told to use (:func:`configure_llama_server`: the TUI's
   saved setting, after :func:`check_llama_server` accepted it),
3. homelab's own CUDA build under ``data_dir()/engine``, then the official prebuilt release
   fetched there (``homelab engine fetch``: CUDA 13, CUDA 12, Vulkan), then the CPU build,
4. ``llama-server`` on ``PATH``.

:func:`locate_rpc_server` finds the RPC worker (``rpc-server``, run by ``homelab worker``)
by the same rules: ``HOMELAB_RPC_SERVER``, the one beside the llama-server found, homelab's
own build, then ``rpc-server`` / ``ggml-rpc-server`` on ``PATH``.

The pinned engine identity (llama.cpp release build number and commit) lives here
too, because both this module (which cached build to look for) and
``homelab.engine.llamacpp.build`` (what to build) need it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from homelab.errors import EngineError
from homelab.paths import data_dir

#: The llama.cpp release homelab is built and tested against (tag ``b11312``).
LLAMA_CPP_BUILD_NUMBER = 11312
#: Its commit, as upstream abbreviates it in release names (``b11312-0c1e57098``).
LLAMA_CPP_COMMIT = "0c1e57098"
#: Folder-name version of the pinned engine.
LLAMA_CPP_VERSION = f"b{LLAMA_CPP_BUILD_NUMBER}"
#: What a build folder's name says beyond version and variant: built with the RPC backend
#: (llama-server accepts ``--rpc``; ``rpc-server`` is beside it). Changing it rebuilds once.
BUILD_FEATURES = "rpc"
RPC_SERVER = "rpc-server"
RPC_ENV_VAR = "HOMELAB_RPC_SERVER"
_RPC_PATH_NAMES = (RPC_SERVER, "ggml-rpc-server")  # the latter: upstream's target name
_RPC_USAGE_OPTION = "--cache"  # only rpc-server's usage has it beside -H/--host and -p/--port

ENV_VAR = "HOMELAB_LLAMA_SERVER"
VARIANTS = ("cuda", "cpu")  # preference order of our own builds
ReleaseFlavour = Literal["cuda-13.4", "cuda-12.8", "vulkan"]
RELEASE_FLAVOURS: tuple[ReleaseFlavour, ...] = ("cuda-13.4", "cuda-12.8", "vulkan")
"""The official Linux x64 release archives homelab fetches (``llama-bN-bin-ubuntu-F-x64``),
in preference order: found after our CUDA build and before our CPU one."""
MANIFEST_NAME = "manifest.json"
BUILD_HINT = (
    "run `homelab engine fetch` (llama.cpp's prebuilt GPU release, seconds) or `homelab "
    "engine build` (from source once: CUDA where a card is, ~7 min for the CPU on 2 cores), "
    f"or set {ENV_VAR}=/path/to/llama-server"
)

SERVER_ONLY_OPTION = "--slots"
"""An option only llama-server's ``--help`` lists (llama-cli, llama-bench... print the same
``--version`` line), used to tell that a binary someone points to really is llama-server."""

_VERSION_NEW = re.compile(r"version:\s*(\S+)\s*\(build\s+(\d+),\s*commit\s+([0-9A-Za-z]+)\)")
_VERSION_OLD = re.compile(r"version:\s*(\d+)\s*\(([0-9A-Za-z]+)\)")


@dataclass(frozen=True)
class EngineVersion:
    """What ``llama-server --version`` says about itself."""

    build: int
    commit: str
    release: str | None = None  # e.g. "0.5.0-dev"; older builds do not print one

    @property
    def tag(self) -> str:
        """The upstream release name, e.g. ``b11312-0c1e57098``."""
        return f"b{self.build}-{self.commit}"


@dataclass(frozen=True)
class Located:
    """A llama-server binary and which rule found it (``env``, ``build:cpu``, ``path``...)."""

    path: Path
    origin: str


def engine_root() -> Path:
    """Folder holding homelab's own llama-server builds."""
    return data_dir() / "engine"


def install_dir(variant: str, version: str = LLAMA_CPP_VERSION) -> Path:
    """Folder of one build, e.g. ``.../engine/llama.cpp-b11312-cpu-rpc``."""
    return engine_root() / f"llama.cpp-{version}-{variant}-{BUILD_FEATURES}"


def release_dir(flavour: str, version: str = LLAMA_CPP_VERSION) -> Path:
    """Folder of one fetched release, e.g. ``.../engine/llama.cpp-b11312-release-cuda-13.4``."""
    return engine_root() / f"llama.cpp-{version}-release-{flavour}"


def binary_path(variant: str, version: str = LLAMA_CPP_VERSION) -> Path:
    """The llama-server inside one build folder."""
    return install_dir(variant, version) / "bin" / "llama-server"


def read_manifest(variant: str, version: str = LLAMA_CPP_VERSION) -> dict[str, Any] | None:
    """The JSON manifest of one build, or None when it is missing or unreadable."""
    try:
        value = json.loads((install_dir(variant, version) / MANIFEST_NAME).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def is_executable_file(path: Path) -> bool:
    """True for an existing regular file this user may execute."""
    return path.is_file() and os.access(path, os.X_OK)


def cached_build(variant: str) -> Path | None:
    """Our complete build of the pinned version for ``variant`` (binary + manifest), if any."""
    path = binary_path(variant)
    if is_executable_file(path) and read_manifest(variant) is not None:
        return path
    return None


def cached_release(flavour: str) -> Path | None:
    """The llama-server of a complete fetch of ``flavour`` (binary, and a manifest that names
    the flavour), if any."""
    folder = release_dir(flavour)
    binary = folder / "bin" / "llama-server"
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    complete = isinstance(manifest, dict) and manifest.get("flavour") == flavour
    return binary if complete and is_executable_file(binary) else None


def _own_engines() -> list[tuple[str, Path | None]]:
    """Our builds and fetched releases, in the order they are preferred (rule 3)."""
    return [
        ("build:cuda", cached_build("cuda")),
        *((f"release:{f}", cached_release(f)) for f in RELEASE_FLAVOURS),
        ("build:cpu", cached_build("cpu")),
    ]


@dataclass(frozen=True)
class _Configured:
    path: Path
    setting: str


_configured: _Configured | None = None


def configure_llama_server(
    path: Path | None, *, setting: str = "the configured llama-server"
) -> None:
    """Run ``path`` from now on in this process (rule 2 of the module docstring): a
    front-end's saved choice. ``setting`` names where it is kept, for the errors when it is
    gone. None forgets it. ``HOMELAB_LLAMA_SERVER`` still wins over it."""
    global _configured
    _configured = None if path is None else _Configured(Path(path).expanduser(), setting)


def _usable(path: Path, setting: str, points: str) -> Path:
    """``path`` resolved, or EngineError naming ``setting`` when it is missing or not executable."""
    if not path.exists():
        raise EngineError(
            f"{points} {path}, which does not exist",
            hint=f"fix or unset {setting}, or run `homelab engine build`",
        )
    if not is_executable_file(path):
        raise EngineError(
            f"{points} {path}, which is not an executable file",
            hint=f"chmod +x it, or fix or unset {setting}",
        )
    return path.resolve()


def locate_llama_server() -> Located:
    """Find the llama-server to run and say which rule found it (see module docstring)."""
    override = os.environ.get(ENV_VAR, "").strip()
    if override:
        return Located(_usable(Path(override).expanduser(), ENV_VAR, f"{ENV_VAR} points to"), "env")
    if _configured is not None:
        where = _configured.setting
        return Located(_usable(_configured.path, where, f"{where} points to"), "setting")
    for origin, found in _own_engines():
        if found is not None:
            return Located(found, origin)
    on_path = shutil.which("llama-server")
    if on_path:
        return Located(Path(on_path).resolve(), "path")
    looked = ", ".join(str(binary_path(v)) for v in VARIANTS)
    raise EngineError(
        f"no llama-server found ({ENV_VAR} unset; none at {looked}; none on PATH)",
        hint=BUILD_HINT,
        title="No engine",
    )


def find_llama_server() -> Path:
    """Path of the llama-server to run; EngineError with a build hint when there is none."""
    return locate_llama_server().path


def parse_version_output(text: str) -> EngineVersion | None:
    """Parse ``--version`` output, new (``version: 0.5.0-dev (build N, commit H)``) or old
    (``version: N (H)``) style; None when no version line is there."""
    match = _VERSION_NEW.search(text)
    if match:
        return EngineVersion(int(match.group(2)), match.group(3), match.group(1))
    match = _VERSION_OLD.search(text)
    if match:
        return EngineVersion(int(match.group(1)), match.group(2))
    return None


def run_help(path: Path, timeout: float = 60.0) -> str | None:
    """Raw ``path --help`` output (stdout + stderr), or None when it cannot run."""
    return _run_flag(path, "--help", timeout)


def looks_like_rpc_server(usage: str) -> bool:
    """Does this ``--help`` output read like llama.cpp's rpc-server's?"""
    return all(flag in usage for flag in ("--host", "--port", _RPC_USAGE_OPTION, "--threads"))


def locate_rpc_server() -> Located:
    """Find the rpc-server ``homelab worker`` runs (rules in the module docstring).

    Raises:
        EngineError: none found, or ``HOMELAB_RPC_SERVER`` points nowhere usable.
    """
    override = os.environ.get(RPC_ENV_VAR, "").strip()
    if override:
        where = f"{RPC_ENV_VAR} points to"
        return Located(_usable(Path(override).expanduser(), RPC_ENV_VAR, where), "env")
    try:
        server = locate_llama_server()
    except EngineError:
        server = None
    if server is not None:
        beside = server.path.parent / RPC_SERVER
        if is_executable_file(beside):
            return Located(beside, f"beside:{server.origin}")
    for origin, found in _own_engines():
        path = None if found is None else found.parent / RPC_SERVER
        if path is not None and is_executable_file(path):
            return Located(path, origin)
    for name in _RPC_PATH_NAMES:
        on_path = shutil.which(name)
        if on_path:
            return Located(Path(on_path).resolve(), "path")
    raise EngineError(
        f"no rpc-server found ({RPC_ENV_VAR} unset; none beside "
        f"{server.path if server else 'a llama-server'}; none on PATH)",
        hint="run `homelab engine build` (it builds rpc-server with llama-server), "
        f"or set {RPC_ENV_VAR}=/path/to/rpc-server",
        title="No RPC worker",
    )


def run_version(path: Path, timeout: float = 60.0) -> str | None:
    """Raw ``path --version`` output (stdout + stderr), or None when it cannot run."""
    return _run_flag(path, "--version", timeout)


def _run_flag(path: Path, flag: str, timeout: float = 60.0) -> str | None:
    """Raw ``path FLAG`` output (stdout + stderr), or None when it cannot run."""
    try:
        done = subprocess.run(
            [str(path), flag],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace")


def check_llama_server(path: Path, *, setting: str = "the llama-server path") -> EngineVersion:
    """Is ``path`` a llama-server this machine runs? Its version when it is.

    Checks that it exists, is an executable file, answers ``--version`` like llama.cpp and
    lists :data:`SERVER_ONLY_OPTION` in its ``--help`` (so not llama-cli or another tool).

    Raises:
        EngineError: which of these failed, with what it said; the hint names ``setting``.
    """
    path = _usable(Path(path).expanduser(), setting, f"{setting} is")
    output = run_version(path)
    parsed = parse_version_output(output) if output is not None else None
    if parsed is None:
        said = (output or "").strip().splitlines()[:3]
        raise EngineError(
            f"{path} does not answer `--version` like llama.cpp's llama-server"
            + (f"; it said: {' / '.join(said)}" if said else " (it could not be run)"),
            hint=f"point {setting} at a llama-server binary (llama.cpp's `build/bin/llama-server`), "
            "or run `homelab engine build`",
            title="Not llama-server",
        )
    usage = run_help(path)
    if usage is None or SERVER_ONLY_OPTION not in usage:
        raise EngineError(
            f"{path} is llama.cpp {parsed.tag} but not its server: its `--help` lists no "
            f"{SERVER_ONLY_OPTION}",
            hint=f"point {setting} at llama-server (not llama-cli or another llama.cpp tool)",
            title="Not llama-server",
        )
    return parsed


def engine_version(path: Path) -> str | None:
    """The engine's release tag (e.g. ``b11312-0c1e57098``), or None when unknown."""
    output = run_version(path)
    parsed = parse_version_output(output) if output is not None else None
    return parsed.tag if parsed else None
