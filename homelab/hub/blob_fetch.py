"""One file from the Hub into the cache's ``blobs/``: resumable across runs, sha256-checked.

Why not only ``hf_hub_download``: huggingface_hub 2.x writes each download to a
process-unique temporary file and deletes it when the download fails or is interrupted
(its retries inside one call also restart from its last 10 MiB chunk), so a 17 GB GGUF
cut at 90 % by a suspend or Ctrl-C starts again from zero (huggingface_hub#4196). Here
the partial blob is kept as ``blobs/<etag>.incomplete`` and the next attempt asks for the
rest with ``Range: bytes=<have>-``.

What still comes from huggingface_hub: the resolve URL (``hf_hub_url``), the metadata
``HEAD`` (``get_hf_file_metadata``: commit, ETag, size, CDN location, its error
classes), the request headers (``build_hf_headers``), the cache lock (``WeakFileLock``,
shared with ``hf download``), and, after this module, the snapshot symlink and ``refs``
(``hf_hub_download`` finds the blob in place and only links it).

The content is hashed while it streams (the partial part first, when resuming) and
compared with the Hub's LFS sha256 (or git blob sha1 for a non-LFS file) before it
becomes the blob; a mismatch deletes the partial file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from homelab.hub import hf_cache
from homelab.hub.errors import (
    ChecksumMismatchError,
    HubError,
    HubNetworkError,
    NotEnoughDiskError,
    is_transport_error,
    translate,
)
from homelab.hub.quant_match import RemoteFile
from homelab.hub.remote_source import for_host, hub_headers

ATTEMPTS = 5
"""Connection drops in a row (without new bytes) before giving up; new bytes reset the count."""
RETRY_WAIT_S = 0.5
_CHUNK = 1024 * 1024
_TIMEOUT = httpx.Timeout(60.0, connect=10.0)

BytesCallback = Callable[[int, int], None]
"""``(bytes of this file on disk now, bytes fetched over the network just now)``."""


@dataclass(frozen=True)
class FetchTarget:
    """A file to fetch: which repo and revision, what the listing promised about it."""

    repo: str
    commit: str
    file: RemoteFile
    cache_dir: Path
    endpoint: str
    token: str | None


def _new_hasher(file: RemoteFile) -> hashlib._Hash:
    if file.sha256:
        return hashlib.sha256()
    hasher = hashlib.sha1()
    hasher.update(b"blob %d\0" % (file.size or 0))
    return hasher


def _hash_existing(path: Path, hasher: hashlib._Hash, on_bytes: BytesCallback) -> None:
    """Feed the partial file to the hasher (so resuming costs one local read, not a refetch)."""
    done = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
            done += len(chunk)
    on_bytes(done, 0)


def fetch_blob(target: FetchTarget, on_bytes: BytesCallback) -> None:
    """Download ``target`` into ``blobs/<etag>`` (resuming a partial one).

    Raises:
        ChecksumMismatchError: the bytes do not hash to the listing's sha256 (partial deleted).
        HubNetworkError: the connection kept failing without progress.
        HubError: the Hub refused (gated, not found...) or answered nonsense.
    """
    from huggingface_hub.utils import WeakFileLock

    etag = hf_cache.etag_for(target.file)
    if etag is None or target.file.size is None:
        raise HubError(
            f"{target.repo}/{target.file.path}: the listing gave no size or hash to check it against"
        )
    blob = hf_cache.blob_path(target.cache_dir, target.repo, etag)
    lock = hf_cache.lock_path(target.cache_dir, target.repo, etag)
    lock.parent.mkdir(parents=True, exist_ok=True)
    blob.parent.mkdir(parents=True, exist_ok=True)
    with httpx.Client(timeout=_TIMEOUT, follow_redirects=True) as client, WeakFileLock(lock):
        if blob.is_file() and blob.stat().st_size == target.file.size:
            on_bytes(target.file.size, 0)
        else:
            _fetch_locked(target, blob, on_bytes, client)


def _fetch_locked(
    target: FetchTarget, blob: Path, on_bytes: BytesCallback, client: httpx.Client
) -> None:
    partial = blob.with_name(blob.name + hf_cache.INCOMPLETE_SUFFIX)
    size = target.file.size
    assert size is not None
    if partial.exists() and partial.stat().st_size > size:
        partial.unlink()  # longer than the file: not ours to trust
    hasher = _new_hasher(target.file)
    if partial.exists():
        _hash_existing(partial, hasher, on_bytes)
    else:
        on_bytes(0, 0)
    failures = 0
    while True:
        try:
            _stream_rest(target, partial, hasher, on_bytes, client)
            break
        except _Dropped as dropped:
            failures = 0 if dropped.fetched else failures + 1
            if failures >= ATTEMPTS:
                raise HubNetworkError(
                    f"downloading {target.repo}/{target.file.path} failed {failures} times in a row: "
                    f"{dropped.reason}",
                    hint="Run the same command again later: the download resumes where it stopped.",
                ) from None
            if dropped.restart:
                partial.unlink(missing_ok=True)
                hasher = _new_hasher(target.file)
                on_bytes(0, 0)
            time.sleep(RETRY_WAIT_S * max(failures, 1))
    digest = hasher.hexdigest()
    expected = target.file.sha256 or target.file.git_oid
    if digest != expected:
        partial.unlink(missing_ok=True)
        kind = "sha256" if target.file.sha256 else "git sha1"
        raise ChecksumMismatchError(
            f"{target.repo}/{target.file.path} downloaded but its {kind} is {digest}, not {expected} "
            "as the Hub says; the bad file was deleted",
            hint="Run the same command again to download it afresh; if it fails again, the "
            "file on the server (or a proxy in between) is damaged.",
        )
    os.replace(partial, blob)


class _Dropped(Exception):
    """Internal: this attempt ended early; ``fetched`` new bytes were appended (kept)."""

    def __init__(self, reason: str, fetched: int, *, restart: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.fetched, self.restart = reason, fetched, restart


def _locate(target: FetchTarget) -> tuple[str, dict[str, str]]:
    """HEAD the resolve URL at the pinned commit: where the bytes are, and the headers for there."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(
        target.repo, target.file.path, revision=target.commit, endpoint=target.endpoint
    )
    try:
        meta = get_hf_file_metadata(url, token=target.token or False, endpoint=target.endpoint)
    except Exception as error:
        if is_transport_error(error):
            raise _Dropped(f"{type(error).__name__}: {error}", 0) from None
        raise translate(error, repo=target.repo, filename=target.file.path) from None
    expected = hf_cache.etag_for(target.file)
    if meta.etag != expected or (meta.size is not None and meta.size != target.file.size):
        raise HubError(
            f"{target.repo}/{target.file.path} changed on the Hub while homelab was looking at it "
            f"(ETag {meta.etag}, expected {expected})",
            hint="Run the same command again.",
        )
    return meta.location, for_host(hub_headers(target.token), meta.location, url)


def _stream_rest(
    target: FetchTarget,
    partial: Path,
    hasher: hashlib._Hash,
    on_bytes: BytesCallback,
    client: httpx.Client,
) -> None:
    """GET the bytes after those in ``partial``, append and hash them.

    The hasher has seen exactly the bytes in ``partial`` (writes happen before hashing and
    a failed write raises), so a dropped connection leaves both in step for the next try.
    """
    size = target.file.size
    assert size is not None
    have = partial.stat().st_size if partial.exists() else 0
    if have == size:
        return
    location, headers = _locate(target)
    if have:
        headers["Range"] = f"bytes={have}-"
    fetched = 0
    try:
        with client.stream("GET", location, headers=headers) as response:
            if response.status_code in (408, 429, 500, 502, 503, 504):
                raise _Dropped(f"the server answered {response.status_code}", 0)
            if have and response.status_code == 200:
                raise _Dropped(
                    "the server ignored the Range request; starting over", 0, restart=True
                )
            if response.status_code not in (200, 206):
                raise HubError(
                    f"{target.repo}/{target.file.path}: the download answered "
                    f"{response.status_code} {response.reason_phrase}",
                    hint="Run the same command again; if it persists, the Hub may be having trouble.",
                )
            try:
                with open(partial, "ab") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                        hasher.update(chunk)
                        have += len(chunk)
                        fetched += len(chunk)
                        on_bytes(have, len(chunk))
                    out.flush()
                    os.fsync(out.fileno())
            except OSError as error:
                raise _write_failed(target, partial, error) from None
    except (httpx.TransportError, httpx.StreamError) as error:
        raise _Dropped(f"{type(error).__name__}: {error}", fetched) from None
    if have != size:
        raise _Dropped(f"the server sent {have:,} of {size:,} bytes", fetched)


def _write_failed(target: FetchTarget, partial: Path, error: OSError) -> HubError:
    """The error for a failed write into ``partial``, which is kept: the next pull resumes it.

    A full disk (``ENOSPC``, or ``EDQUOT``: the user's quota) is a ``NotEnoughDiskError`` with
    what is still missing and what is free now; anything else names the file and the reason.
    """
    size = target.file.size or 0
    try:
        kept = partial.stat().st_size
    except OSError:
        kept = 0
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            free = shutil.disk_usage(partial.parent).free
        except OSError:
            free = 0
        full = NotEnoughDiskError(needed=size - kept, free=free, where=str(partial.parent))
        full.message = (
            f"the disk filled up while downloading {target.repo}/{target.file.path}: "
            + (full.message)
        )
        full.hint = (
            f"Free some space, or point HF_HOME (or HF_HUB_CACHE) at a bigger disk; the "
            f"{kept:,} bytes fetched so far are kept in {partial} and the next pull resumes there."
        )
        return full
    return HubError(
        f"writing {partial} failed after {kept:,} of {size:,} bytes: {error.strerror or error}",
        hint="The bytes fetched so far are kept; fix the disk and run the same command again "
        "to resume.",
        title="Download failed",
    )
