"""Header bytes of remote GGUF files, kept on disk so the next plan or menu needs no network.

A remote plan reads a few megabytes of header (mostly the vocabulary) per file. Those
bytes are stored under ``cache_dir()/headers``, keyed by what makes them immutable:
repo, commit sha, file name and ETag (an LFS file's sha256). Parsing them again takes
milliseconds and works with ``HF_HUB_OFFLINE=1``. For offline use the branch names a
listing resolved (``main`` → sha) are remembered too, like the HF cache's ``refs/``.

The cache is bounded (``DEFAULT_LIMIT`` bytes of headers): after each store the least
recently used headers are deleted until it fits. Writes are atomic (temp file, then
rename), so two homelab processes can share it; a damaged entry is ignored and removed.

The stored bytes are the exact prefix ``[0, header_bytes)`` of the file. The header
reader skips bytes it does not need (string bodies, the token-type array), so
``read_header_capturing`` fetches those holes after the parse: the total stays close
to the header's size.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader
from homelab.gguf.reader import read_header
from homelab.gguf.source import ByteSource, BytesSource
from homelab.hub import hf_cache
from homelab.paths import cache_dir
from homelab.units import KiB, MiB

DEFAULT_LIMIT = 512 * MiB
"""About 60 vocabulary-heavy headers (a 150k-token vocabulary is ~7 MB)."""
COALESCE_GAP = 64 * KiB
"""Holes at most this far apart are fetched in one request (a round trip costs more)."""
_SHA = re.compile(r"^[0-9a-f]{40}$")
_FORMAT = 1


@dataclass(frozen=True, slots=True)
class HeaderKey:
    """What identifies one file's header for good."""

    repo_id: str
    revision: str
    """The commit sha (a branch name would move)."""
    filename: str
    etag: str | None
    """The Hub's ETag for the file (an LFS file's sha256, else its git blob id)."""


@dataclass(frozen=True, slots=True)
class CachedHeader:
    """One stored header: the bytes ``[0, header_bytes)`` and what they came from."""

    key: HeaderKey
    data: bytes
    file_size: int | None
    url: str

    def parse(self) -> GgufHeader:
        """The header these bytes hold, with the whole file's size (the prefix is shorter).

        Raises:
            ModelFileError: the bytes are not a complete GGUF header (the entry is damaged).
        """
        header = read_header(BytesSource(self.data, name=self.url))
        if header.header_bytes != len(self.data):
            raise ModelFileError(
                f"{self.url}: the cached header holds {len(self.data):,} bytes, but the "
                f"header it holds is {header.header_bytes:,} bytes"
            )
        return replace(header, file_size=self.file_size)


@dataclass(frozen=True, slots=True)
class StoredHeader:
    """What the cache holds for one file (without reading the bytes): for offline listings."""

    filename: str
    etag: str | None
    file_size: int | None


class HeaderCache:
    """The on-disk store. ``root`` defaults to ``cache_dir()/headers`` (created on first store)."""

    def __init__(self, root: Path | None = None, *, limit_bytes: int = DEFAULT_LIMIT) -> None:
        self._root = root
        self.limit_bytes = limit_bytes

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = cache_dir() / "headers"
        return self._root

    # -- lookups ------------------------------------------------------------------------

    def get(self, key: HeaderKey) -> CachedHeader | None:
        """The entry stored under exactly ``key``, or ``None``."""
        return self._load(self._entry_path(key))

    def find(self, repo_id: str, revision: str, filename: str) -> CachedHeader | None:
        """The newest entry for ``filename`` at ``revision`` (a sha, or a branch a listing
        resolved earlier), whatever its ETag: the offline lookup."""
        commit = self.commit_for(repo_id, revision)
        if commit is None:
            return None
        found = [e for e in self._entries(repo_id, commit) if e[1].get("filename") == filename]
        found.sort(key=lambda e: e[1].get("stored_at", 0), reverse=True)
        for path, _ in found:
            entry = self._load(path)
            if entry is not None:
                return entry
        return None

    def stored(self, repo_id: str, revision: str) -> list[StoredHeader]:
        """What is stored for ``repo_id`` at ``revision`` (newest entry per file), without the bytes."""
        commit = self.commit_for(repo_id, revision)
        if commit is None:
            return []
        newest: dict[str, dict] = {}
        for _, meta in self._entries(repo_id, commit):
            name = meta["filename"]
            if name not in newest or meta.get("stored_at", 0) > newest[name].get("stored_at", 0):
                newest[name] = meta
        return [
            StoredHeader(name, meta.get("etag"), _int_or_none(meta.get("file_size")))
            for name, meta in sorted(newest.items())
        ]

    def commit_for(self, repo_id: str, revision: str) -> str | None:
        """``revision`` itself when it is a commit sha, else the sha a listing resolved it to."""
        return hf_cache.cached_commit(revision, self.ref_path(repo_id, revision))

    # -- stores -------------------------------------------------------------------------

    def put(self, key: HeaderKey, data: bytes, file_size: int | None, url: str) -> None:
        """Store a header's bytes (best effort: a full or read-only disk only loses the cache)."""
        if len(data) > self.limit_bytes:
            return
        path = self._entry_path(key)
        meta = {
            "format": _FORMAT,
            "repo_id": key.repo_id,
            "revision": key.revision,
            "filename": key.filename,
            "etag": key.etag,
            "file_size": file_size,
            "url": url,
            "header_bytes": len(data),
            "stored_at": time.time(),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path.with_suffix(".hdr"), data)
            _write_atomic(path.with_suffix(".json"), json.dumps(meta).encode())
            self.prune(keep=path)
        except OSError:
            return

    def remember_ref(self, repo_id: str, ref: str, commit: str) -> None:
        """Note that ``ref`` (e.g. ``main``) pointed at ``commit`` (best effort)."""
        if ref == commit or not _SHA.match(commit):
            return
        path = self.ref_path(repo_id, ref)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, commit.encode())
        except OSError:
            return

    def discard(self, key: HeaderKey) -> None:
        """Remove an entry (e.g. one that no longer parses)."""
        _remove(self._entry_path(key))

    def prune(self, keep: Path | None = None) -> None:
        """Delete least recently used headers until the total is within ``limit_bytes``."""
        files = self._all_data_files()
        total = sum(size for _, size, _ in files)
        for path, size, _ in sorted(files, key=lambda f: f[2]):
            if total <= self.limit_bytes:
                break
            if keep is not None and path.with_suffix("") == keep.with_suffix(""):
                continue
            _remove(path)
            total -= size

    # -- layout -------------------------------------------------------------------------

    def ref_path(self, repo_id: str, ref: str) -> Path:
        """The file noting the commit ``ref`` was last resolved to (written when it was)."""
        return hf_cache.repo_dir(self.root, repo_id) / "refs" / quote(ref, safe="")

    def _entry_path(self, key: HeaderKey) -> Path:
        digest = hashlib.sha256(f"{key.filename}\0{key.etag or ''}".encode()).hexdigest()[:32]
        return hf_cache.repo_dir(self.root, key.repo_id) / key.revision / digest

    def _entries(self, repo_id: str, commit: str) -> list[tuple[Path, dict]]:
        folder = hf_cache.repo_dir(self.root, repo_id) / commit
        entries = []
        for meta_path in folder.glob("*.json") if folder.is_dir() else ():
            meta = _read_meta(meta_path)
            if meta is not None:
                entries.append((meta_path.with_suffix(""), meta))
        return entries

    def _all_data_files(self) -> list[tuple[Path, int, float]]:
        out = []
        for path in self.root.glob("models--*/*/*.hdr") if self.root.is_dir() else ():
            try:
                info = path.stat()
            except OSError:
                continue
            out.append((path, info.st_size, info.st_mtime))
        return out

    def _load(self, path: Path) -> CachedHeader | None:
        meta = _read_meta(path.with_suffix(".json"))
        if meta is None:
            return None
        try:
            data = path.with_suffix(".hdr").read_bytes()
        except OSError:
            return None
        if len(data) != meta.get("header_bytes"):
            _remove(path)
            return None
        try:
            os.utime(path.with_suffix(".hdr"))  # recently used: pruned last
        except OSError:
            pass
        key = HeaderKey(meta["repo_id"], meta["revision"], meta["filename"], meta.get("etag"))
        return CachedHeader(key, data, _int_or_none(meta.get("file_size")), str(meta["url"]))


def read_header_capturing(source: ByteSource) -> tuple[GgufHeader, bytes]:
    """Parse the header behind ``source`` and return it with its bytes ``[0, header_bytes)``.

    The parse fetches what it reads; the ranges it skipped are fetched afterwards
    (neighbouring holes in one request).

    Raises:
        ModelFileError: see ``read_header``; or the source ends inside a hole.
    """
    capture = _Capture(source)
    header = read_header(capture)
    end = header.header_bytes
    prefix = bytearray(end)
    covered: list[tuple[int, int]] = []
    for offset, data in capture.chunks:
        piece = data[: max(0, end - offset)]
        if piece:
            prefix[offset : offset + len(piece)] = piece
            covered.append((offset, offset + len(piece)))
    for start, stop in _holes(covered, end):
        data = source.read(start, stop - start)
        if len(data) != stop - start:
            raise ModelFileError(
                f"{source.name}: the file ended at byte {start + len(data):,}, "
                f"inside its own header ({end:,} bytes)"
            )
        prefix[start:stop] = data
    return header, bytes(prefix)


class _Capture:
    """A source wrapper that keeps every chunk read through it."""

    def __init__(self, inner: ByteSource) -> None:
        self.inner = inner
        self.name = inner.name
        self.chunks: list[tuple[int, bytes]] = []

    def size(self) -> int | None:
        return self.inner.size()

    def read(self, offset: int, length: int) -> bytes:
        data = self.inner.read(offset, length)
        if data:
            self.chunks.append((offset, data))
        return data


def _holes(covered: list[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """The ranges of ``[0, end)`` not in ``covered``, merging holes at most ``COALESCE_GAP`` apart."""
    holes: list[tuple[int, int]] = []
    at = 0
    for start, stop in sorted(covered):
        if start > at:
            holes.append((at, start))
        at = max(at, stop)
    if at < end:
        holes.append((at, end))
    merged: list[tuple[int, int]] = []
    for start, stop in holes:
        if merged and start - merged[-1][1] <= COALESCE_GAP:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_meta(path: Path) -> dict | None:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        return None
    needed = ("repo_id", "revision", "filename", "url")
    return meta if all(isinstance(meta.get(k), str) for k in needed) else None


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(Path(tmp))
        raise


def _remove(entry: Path) -> None:
    """Delete an entry's two files (``entry`` without its suffix, or either file)."""
    for suffix in (".json", ".hdr"):
        _unlink(entry.with_suffix(suffix))


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
