"""Reading the standard Hugging Face cache: what a repo has on disk, where its files go.

The layout is huggingface_hub's (and llama-server ``-hf``'s)::

    <cache>/models--owner--name/
        refs/main                      the commit "main" pointed at when last asked
        blobs/<sha256 or git sha1>     file contents, named by their ETag
        snapshots/<commit>/<path>      relative symlinks into ../../blobs/

homelab adds one name: ``blobs/<etag>.incomplete``, the part of a blob downloaded so far
(huggingface_hub 2.x deletes its own partial files on failure; this one is kept so the
next ``homelab pull`` resumes it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from homelab.hub.quant_match import RemoteFile, is_model_gguf

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")
INCOMPLETE_SUFFIX = ".incomplete"


def repo_dir(cache_dir: Path, repo: str) -> Path:
    """``<cache>/models--owner--name``."""
    return cache_dir / ("models--" + repo.replace("/", "--"))


def blob_path(cache_dir: Path, repo: str, etag: str) -> Path:
    """Where the blob named ``etag`` lives."""
    return repo_dir(cache_dir, repo) / "blobs" / etag


def incomplete_path(cache_dir: Path, repo: str, etag: str) -> Path:
    """Where homelab keeps the partly downloaded blob ``etag``."""
    return repo_dir(cache_dir, repo) / "blobs" / (etag + INCOMPLETE_SUFFIX)


def lock_path(cache_dir: Path, repo: str, etag: str) -> Path:
    """The lock huggingface_hub takes while writing blob ``etag`` (homelab takes the same one)."""
    return cache_dir / ".locks" / repo_dir(cache_dir, repo).name / f"{etag}.lock"


def snapshot_path(cache_dir: Path, repo: str, commit: str, filename: str) -> Path:
    """``snapshots/<commit>/<filename>`` (a symlink to its blob once cached)."""
    return repo_dir(cache_dir, repo) / "snapshots" / commit / filename


def etag_for(file: RemoteFile) -> str | None:
    """The blob name the Hub's ETag will give ``file``: its LFS sha256, else its git sha1."""
    return file.sha256 or file.git_oid


def cached_commit(revision: str, ref_file: Path) -> str | None:
    """The commit the file ``ref_file`` (a cache's ``refs/<revision>``) records, or None;
    a commit hash names itself."""
    if _SHA1.fullmatch(revision):
        return revision
    try:
        commit = ref_file.read_text().strip()
    except OSError:
        return None
    return commit if _SHA1.fullmatch(commit) else None


def is_cached(cache_dir: Path, repo: str, commit: str, file: RemoteFile) -> bool:
    """The snapshot entry exists and its blob is whole (size checked when known)."""
    path = snapshot_path(cache_dir, repo, commit, file.path)
    try:
        size = path.stat().st_size  # follows the symlink: a dangling one raises
    except OSError:
        return False
    return file.size is None or size == file.size


def present_bytes(cache_dir: Path, repo: str, file: RemoteFile) -> int:
    """How much of ``file`` is on disk already: all of it (blob) or the partial download."""
    etag = etag_for(file)
    if etag is None:
        return 0
    try:
        size = blob_path(cache_dir, repo, etag).stat().st_size
        if file.size is None or size == file.size:
            return size
    except OSError:
        pass
    try:
        partial = incomplete_path(cache_dir, repo, etag).stat().st_size
    except OSError:
        return 0
    return partial if file.size is None or partial <= file.size else 0


def cached_listing(
    cache_dir: Path, repo: str, revision: str = "main"
) -> tuple[str, list[RemoteFile]] | None:
    """The files of ``repo`` cached for ``revision``: (commit, files), or None if nothing is.

    Sizes are the blobs' sizes; ``sha256`` / ``git_oid`` come from the blob names.
    """
    commit = cached_commit(revision, repo_dir(cache_dir, repo) / "refs" / revision)
    if commit is None:
        return None
    root = repo_dir(cache_dir, repo) / "snapshots" / commit
    if not root.is_dir():
        return None
    files = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            entry = Path(dirpath) / name
            try:
                size = entry.stat().st_size
            except OSError:
                continue  # a dangling link: the blob was removed
            blob = Path(os.path.realpath(entry)).name
            files.append(
                RemoteFile(
                    path=entry.relative_to(root).as_posix(),
                    size=size,
                    sha256=blob if _SHA256.fullmatch(blob) else None,
                    git_oid=blob if _SHA1.fullmatch(blob) else None,
                )
            )
    return (commit, sorted(files, key=lambda f: f.path)) if files else None


def cached_ggufs(cache_dir: Path) -> list[Path]:
    """Every model GGUF the cache holds (not projectors), as snapshot paths, by repo.

    Only each repo's ``main`` snapshot counts (what ``homelab pull`` and ``-hf`` use);
    a repo whose listing is gone or empty is skipped.
    """
    found: list[Path] = []
    for folder in sorted(cache_dir.glob("models--*")):
        repo = folder.name.removeprefix("models--").replace("--", "/", 1)
        listing = cached_listing(cache_dir, repo)
        if listing is None:
            continue
        commit, files = listing
        root = folder / "snapshots" / commit
        found += [root / f.path for f in files if is_model_gguf(f.path)]
    return found


def existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest existing parent (the cache may not exist yet)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or ".")
