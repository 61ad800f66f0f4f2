"""Write a trimmed copy of the pinned llama.cpp source: only what llama-server and rpc-server
need, small enough to carry to a lent GPU machine (bench/GPU_CHECK.md).

The source is the one homelab already builds (``homelab.engine.llamacpp.source``: the
llama-cpp-python sdist, checksummed, in ``cache_dir()/sources``; fetched from PyPI when
absent). Kept: the top-level CMake files, ``cmake/``, ``ggml/`` (its core, and of its
backends only CPU, CUDA and RPC), ``src/``, ``include/``, ``common/``, ``vendor/``,
``licenses/``, ``app/`` (the unified binary's two files), ``scripts/*.cmake`` and ``tools/``
(every tool's CMake file and sources, since ``tools/CMakeLists.txt`` adds them all; the web
UI's sources, the server's Python tests and benchmarks dropped: with ``LLAMA_BUILD_UI=OFF``
the UI is generated from its two templates). Dropped: tests, examples, docs, models
(vocabulary GGUFs), other backends, gguf-py, the git link, CI files.

    python tools/trim_llama_source.py [--out .gpu_kit/llama.cpp] [--sdist FILE]

prints what it wrote (files, MiB). ``keep(path)`` is the rule (a path inside the
llama.cpp tree); tests check it keeps what CMake needs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from homelab.engine.llamacpp.source import (  # noqa: E402
    SDIST_FILE,
    SDIST_SHA256,
    SDIST_SOURCE_DIR,
    fetch_sdist,
)

DEFAULT_OUT = ROOT / ".gpu_kit" / "llama.cpp"
MANIFEST = "TRIMMED.json"

TOP_FILES = frozenset({"CMakeLists.txt", "CMakePresets.json", "LICENSE"})
TOP_DIRS = frozenset(
    {"app", "cmake", "common", "ggml", "include", "licenses", "src", "tools", "vendor"}
)
GGML_BACKENDS = frozenset({"ggml-cpu", "ggml-cuda", "ggml-rpc"})
"""ggml/src/ggml-* folders kept (each other backend is added only when its GGML_* is on)."""
UI_KEPT = frozenset({"CMakeLists.txt", "ui.cpp.in", "ui.h.in", "sources.cmake", "README.md"})
"""tools/ui: what scripts/ui-assets.cmake reads with LLAMA_BUILD_UI=OFF (the templates)."""
DROPPED_UNDER = ("tools/server/tests/", "tools/server/bench/", "ggml/tests/", "ggml/examples/")


def keep(path: str) -> bool:
    """True when the file at ``path`` (relative to the llama.cpp tree) is kept."""
    parts = PurePosixPath(path).parts
    if not parts:
        return False
    if len(parts) == 1:
        return parts[0] in TOP_FILES
    top = parts[0]
    if top == "scripts":
        return len(parts) == 2 and parts[1].endswith(".cmake")
    if top not in TOP_DIRS:
        return False
    if any(path.startswith(prefix) for prefix in DROPPED_UNDER):
        return False
    if parts[:2] == ("ggml", "src") and len(parts) > 3 and parts[2].startswith("ggml-"):
        return parts[2] in GGML_BACKENDS
    if parts[:2] == ("tools", "ui"):
        return len(parts) == 3 and parts[2] in UI_KEPT
    return True


def source_members(archive: Path) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo, str]]:
    """Every regular file of the sdist's llama.cpp tree: (tar, member, path in the tree)."""
    prefix = SDIST_SOURCE_DIR + "/"
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if member.isfile() and member.name.startswith(prefix):
                yield tar, member, member.name[len(prefix) :]


def member_paths(archive: Path) -> list[tuple[str, int]]:
    """(path, size) of every file in the sdist's llama.cpp tree (nothing written)."""
    return [(path, member.size) for _, member, path in source_members(archive)]


def trim(archive: Path, out: Path) -> dict[str, int | str]:
    """Write the kept files of ``archive`` into ``out`` (replaced whole); returns the manifest."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    kept = dropped = kept_bytes = dropped_bytes = 0
    for tar, member, path in source_members(archive):
        if not keep(path):
            dropped += 1
            dropped_bytes += member.size
            continue
        target = partial / path
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = tar.extractfile(member)
        if handle is None:
            continue
        with handle, target.open("wb") as sink:
            shutil.copyfileobj(handle, sink)
        os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
        kept += 1
        kept_bytes += member.size
    manifest: dict[str, int | str] = {
        "sdist": SDIST_FILE,
        "sha256": SDIST_SHA256,
        "files": kept,
        "bytes": kept_bytes,
        "dropped_files": dropped,
        "dropped_bytes": dropped_bytes,
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    shutil.rmtree(out, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(partial, out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder to write")
    parser.add_argument("--sdist", type=Path, help="the llama-cpp-python sdist (default: cached)")
    args = parser.parse_args(argv)
    archive = args.sdist or fetch_sdist(lambda fraction, line: print(line, file=sys.stderr))
    manifest = trim(archive, args.out)
    mib = int(manifest["bytes"]) / 2**20
    gone = int(manifest["dropped_bytes"]) / 2**20
    print(
        f"{args.out}: {manifest['files']} files, {mib:.1f} MiB "
        f"(dropped {manifest['dropped_files']} files, {gone:.1f} MiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
