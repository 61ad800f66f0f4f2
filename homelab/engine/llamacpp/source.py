"""The pinned llama.cpp source: the llama-cpp-python sdist from PyPI, checksummed, extracted.

The sdist vendors llama.cpp at ``vendor/llama.cpp``; it is fetched with ``pip download``
so the only network homelab needs is the package registry, kept in
``cache_dir()/sources`` (reused), checked against its pinned sha256, and only
``vendor/llama.cpp`` is extracted.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from homelab.engine.llamacpp.build_steps import LOG_TAIL_LINES, ProgressFn
from homelab.errors import EngineError
from homelab.paths import cache_dir

SDIST_PACKAGE = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
SDIST_SOURCE_DIR = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp"


def _no_progress(fraction: float | None, line: str) -> None:
    """Default progress sink: ignore."""


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: Path, expected: str | None = None) -> None:
    """Raise EngineError (after deleting the file) when ``path`` does not hash to ``expected``
    (default: the pinned sdist's sha256)."""
    expected = expected or SDIST_SHA256
    actual = sha256_file(path)
    if actual != expected:
        path.unlink(missing_ok=True)
        raise EngineError(
            f"{path.name} has sha256 {actual}, expected {expected}; the file was deleted",
            hint="run `homelab engine build` again to download it afresh",
            title="Source checksum mismatch",
        )


def fetch_sdist(progress: ProgressFn = _no_progress) -> Path:
    """The checksummed llama-cpp-python sdist in ``cache_dir()/sources``, downloaded if absent."""
    sources = cache_dir() / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    target = sources / SDIST_FILE
    if target.exists():
        verify_sha256(target)
        return target
    progress(None, f"downloading {SDIST_PACKAGE} {SDIST_VERSION} source from PyPI (77 MB)")
    scratch = Path(tempfile.mkdtemp(prefix=".download-", dir=sources))
    try:
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            f"{SDIST_PACKAGE}=={SDIST_VERSION}",
            "-d",
            str(scratch),
        ]
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        got = scratch / SDIST_FILE
        if done.returncode != 0 or not got.exists():
            tail = "\n".join(done.stdout.decode("utf-8", "replace").splitlines()[-LOG_TAIL_LINES:])
            raise EngineError(
                f"could not download {SDIST_PACKAGE}=={SDIST_VERSION} with pip:\n{tail}",
                hint=f"homelab needs PyPI once to fetch the llama.cpp source; offline, put "
                f"{SDIST_FILE} (sha256 {SDIST_SHA256}) into {sources}",
                title="Source download failed",
            )
        verify_sha256(got)
        os.replace(got, target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def extract_source(archive: Path, dest: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` (minus its git link) from the sdist into ``dest``."""
    prefix = SDIST_SOURCE_DIR + "/"

    def only_llama_cpp(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        if not member.name.startswith(prefix) or member.name == prefix + ".git":
            return None
        return tarfile.data_filter(member.replace(name=member.name[len(prefix) :]), path)

    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(partial, filter=only_llama_cpp)
    if not (partial / "CMakeLists.txt").exists():
        raise EngineError(
            f"{archive.name} holds no {SDIST_SOURCE_DIR}", hint=f"delete {archive} and run it again"
        )
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(partial, dest)
    return dest
