"""What files a Hub repo has at one revision: asked of the Hub, or read from this machine.

One API call (``HfApi.model_info(files_metadata=True)``) gives the commit the revision
points at and every file's size, LFS sha256 or git blob id; it pins the commit, so all that
is fetched afterwards comes from one revision. Offline (``HF_HUB_OFFLINE``), or when the
Hub cannot be reached, the listing comes from what this machine holds instead: the
standard HF cache (downloaded files) and, for callers that only read headers, homelab's
header cache (:mod:`homelab.hub.header_cache`).

``homelab pull`` uses :func:`remote_listing` and :func:`cached_listing` (downloaded files
only, with its own wording); model references and ``homelab quants`` use :func:`list_repo`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from homelab.hub import hf_cache, hf_env
from homelab.hub.errors import HubNetworkError, HubOfflineError, is_transport_error, translate
from homelab.hub.header_cache import HeaderCache
from homelab.hub.quant_match import RemoteFile

DEFAULT_REVISION = "main"


@dataclass(frozen=True, slots=True)
class RepoListing:
    """A repo's files at one commit, from the Hub or (offline) from the caches."""

    repo: str
    revision: str
    commit: str
    files: tuple[RemoteFile, ...]
    offline_reason: str | None = None
    """Why the caches were used instead of the Hub; None when the Hub answered."""


class HubUnreachableError(HubNetworkError):
    """The Hub gave no answer at all (connection refused, timeout, broken body), as opposed to
    refusing the request: the one failure after which a listing may come from the caches.

    Attributes:
        error: the HTTP library's exception, for callers that word the failure themselves.
    """

    def __init__(self, message: str, *, error: BaseException, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.error = error

    @property
    def reason(self) -> str:
        """The transport failure in one line: ``ConnectError: [Errno 111] ...``."""
        return f"{type(self.error).__name__}: {self.error}"


def list_repo(
    repo: str, revision: str = DEFAULT_REVISION, *, cache: HeaderCache | None = None
) -> RepoListing:
    """The repo's files at ``revision``: from the Hub (one API call), or from the HF cache and
    the header cache when offline or when the Hub cannot be reached.

    Raises:
        HubAuthError, HubNotFoundError: the Hub refused or does not know the repo/revision.
        HubNetworkError: the Hub is unreachable and the caches know nothing of the repo.
        HubOfflineError: offline and the caches know nothing of the repo.
    """
    cache = cache or HeaderCache()
    if hf_env.offline():
        return _require_cached(repo, revision, cache, "HF_HUB_OFFLINE is set")
    try:
        listing = remote_listing(repo, revision)
    except HubUnreachableError as unreachable:
        try:
            why = f"the Hub is unreachable ({unreachable.message})"
            return _require_cached(repo, revision, cache, why)
        except HubOfflineError:
            raise unreachable from None
    cache.remember_ref(repo, revision, listing.commit)
    return listing


def remote_listing(repo: str, revision: str = DEFAULT_REVISION) -> RepoListing:
    """``model_info(files_metadata=True)``: the commit ``revision`` points at and each file's
    size and hashes.

    Raises:
        HubUnreachableError: no answer from the Hub (the caller may fall back to the caches).
        HubAuthError, HubNotFoundError, HubError: the Hub refused or does not know the
            repo/revision, or its answer names no commit.
    """
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hf_env.endpoint(), token=hf_env.token() or False, library_name="homelab")
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except Exception as error:
        if is_transport_error(error):
            raise HubUnreachableError(
                f"cannot reach {hf_env.endpoint()} to list {repo}: {type(error).__name__}: {error}",
                error=error,
                hint="Check the network (and HF_ENDPOINT if you set it), or set HF_HUB_OFFLINE=1 "
                "to use what is cached.",
            ) from None
        raise translate(error, repo=repo) from None
    if not info.sha:
        raise translate(OSError("the Hub's answer names no commit"), repo=repo)
    files = tuple(
        RemoteFile(
            path=s.rfilename,
            size=s.lfs.size if s.lfs else s.size,
            sha256=s.lfs.sha256 if s.lfs else None,
            git_oid=None if s.lfs else s.blob_id,
        )
        for s in info.siblings or []
    )
    return RepoListing(repo, revision, info.sha, files)


def cached_listing(
    repo: str, revision: str, why: str, *, headers: HeaderCache | None = None
) -> RepoListing | None:
    """What this machine knows of ``repo`` at ``revision``, as one listing whose
    ``offline_reason`` is ``why``; None when it knows nothing.

    Args:
        repo: ``owner/name``.
        revision: the branch, tag or commit asked for.
        why: why the Hub is not asked (kept as the listing's ``offline_reason``).
        headers: also list the files whose header alone is cached there; None lists only
            downloaded files (what ``pull`` can hand over). When the two caches record
            different commits, the one recorded most recently wins.
    """
    hub_cache = hf_env.hub_cache_dir()
    downloaded = hf_cache.cached_listing(hub_cache, repo, revision)
    header_commit = headers.commit_for(repo, revision) if headers is not None else None
    commits = [c for c in (downloaded[0] if downloaded else None, header_commit) if c]
    if not commits:
        return None
    commit = commits[0]
    if headers is not None and len(commits) == 2 and commits[0] != commits[1]:
        header_ref_time = _written_at(headers.ref_path(repo, revision))
        download_ref_time = _written_at(hf_cache.repo_dir(hub_cache, repo) / "refs" / revision)
        commit = commits[1] if header_ref_time > download_ref_time else commits[0]
    files: dict[str, RemoteFile] = {}
    if headers is not None and header_commit == commit:
        for entry in headers.stored(repo, revision):
            etag = entry.etag or ""
            files[entry.filename] = RemoteFile(
                entry.filename,
                entry.file_size,
                sha256=etag if len(etag) == 64 else None,
                git_oid=etag if len(etag) == 40 else None,
            )
    if downloaded and downloaded[0] == commit:
        files.update({f.path: f for f in downloaded[1]})
    return RepoListing(
        repo,
        revision,
        commit,
        tuple(sorted(files.values(), key=lambda f: f.path)),
        offline_reason=why,
    )


def _require_cached(repo: str, revision: str, cache: HeaderCache, why: str) -> RepoListing:
    """:func:`cached_listing` with the header cache, or an error naming both caches.

    Raises:
        HubOfflineError: neither cache knows the repo at that revision.
    """
    listing = cached_listing(repo, revision, why, headers=cache)
    if listing is None:
        raise HubOfflineError(
            f"{why}, and nothing of {repo} at {revision} is on this machine: not downloaded "
            f"(HF cache {hf_env.hub_cache_dir()}) and no header cached ({cache.root})",
            hint=f"Run `homelab plan {repo}:QUANT` once online (it reads only the header), or "
            f"`homelab pull {repo}:QUANT`.",
        )
    return listing


def _written_at(ref_file: Path) -> float:
    """When a cache's ``refs/<revision>`` file was written (0 when it was not)."""
    try:
        return ref_file.stat().st_mtime
    except OSError:
        return 0.0
