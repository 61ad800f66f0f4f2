"""``pull``: get a model's GGUF file(s) from the Hub into the standard Hugging Face cache.

The flow, for ``owner/name[:QUANT]`` or ``owner/name/FILE.gguf``:

1. List the repo (:mod:`homelab.hub.repo_listing`: commit, sizes, LFS sha256).
   Offline (``HF_HUB_OFFLINE`` or ``offline=True``), or when the Hub cannot be reached,
   the listing comes from the downloaded files in the cache instead, and the result says so.
2. Choose the files like llama-server ``-hf`` (:mod:`homelab.hub.quant_match`).
3. Refuse before any byte moves when the cache's disk has less free space than what is
   still missing (partial downloads count as present).
4. Fetch each missing blob, resuming a partial one, hashing as it streams
   (:mod:`homelab.hub.blob_fetch`), then let ``hf_hub_download`` link it into
   ``snapshots/<commit>/`` and write ``refs/<revision>``: the cache is exactly what
   ``hf download`` and ``llama-server -hf`` would leave, and they reuse it.

Progress is reported through a callback (``PullProgress`` events), which the CLI draws as
a bar and the TUI can turn into messages.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from homelab.hub import hf_cache, hf_env
from homelab.hub.errors import (
    BadModelRefError,
    HubError,
    HubOfflineError,
    NotEnoughDiskError,
    QuantNotFoundError,
    translate,
)
from homelab.hub.quant_match import Selection, available_quants, describe_quants, select
from homelab.hub.repo_listing import (
    DEFAULT_REVISION,
    HubUnreachableError,
    cached_listing,
    remote_listing,
)

_REPO_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

State = Literal["cached", "downloading", "done"]


@dataclass(frozen=True)
class PullRef:
    """A parsed model reference: ``repo`` plus a ``quant`` or an exact ``filename`` (or neither)."""

    repo: str
    quant: str | None = None
    filename: str | None = None


@dataclass(frozen=True)
class PullProgress:
    """One progress event.

    Attributes:
        filename: the repo file this event is about.
        state: ``cached`` (nothing to fetch), ``downloading``, ``done`` (verified, in place).
        file_done: bytes of this file on disk now (a resumed file starts above 0).
        file_total: this file's size.
        done: bytes of all selected files on disk now.
        total: all selected files' size.
        fetched: bytes fetched over the network by this pull so far (for speed).
        index: this file's place among the selected files, from 1.
        count: how many files are selected (model parts and projector).
    """

    filename: str
    state: State
    file_done: int
    file_total: int
    done: int
    total: int
    fetched: int
    index: int = 1
    count: int = 1


ProgressCallback = Callable[[PullProgress], None]


@dataclass(frozen=True)
class PulledModel:
    """What ``pull`` got: the model's local path(s) in the HF cache and where they came from.

    Attributes:
        paths: the model GGUF(s) in split-part order (give ``paths[0]`` to llama-server).
        repo: ``owner/name``.
        revision: the commit the files are from.
        quant: the quant tag of the model file's name, or None if it carries none.
        mmproj: the vision projector, when one was wanted and the repo has one.
        from_cache: nothing was asked of the Hub (offline, or the Hub was unreachable).
        fetched: bytes downloaded by this pull (0 when everything was cached).
        note: why the cache was used, when it was.
    """

    paths: tuple[Path, ...]
    repo: str
    revision: str
    quant: str | None
    mmproj: Path | None
    from_cache: bool = False
    fetched: int = 0
    note: str | None = None


def parse_pull_ref(ref: str) -> PullRef:
    """``owner/name``, ``owner/name:QUANT`` or ``owner/name/path/FILE.gguf``.

    Raises:
        BadModelRefError: anything else (with the accepted forms in the hint).
    """
    text = ref.strip()
    for prefix in ("hf://", "https://huggingface.co/", "hf.co/", "huggingface.co/"):
        text = text.removeprefix(prefix)
    quant = filename = None
    if ":" in text:
        text, _, quant = text.partition(":")
    parts = text.strip("/").split("/")
    if len(parts) > 2:
        filename = "/".join(parts[2:])
    repo = "/".join(parts[:2])
    problems = []
    if len(parts) < 2 or not all(
        _REPO_PART.match(p) and "--" not in p and ".." not in p for p in parts[:2]
    ):
        problems.append(f"{repo!r} is not a repo id (owner/name)")
    if quant is not None and (
        not quant or filename is not None or not re.fullmatch(r"[A-Za-z0-9_.-]+", quant)
    ):
        problems.append(f"{quant!r} is not a quant name (e.g. Q4_K_M)")
    if filename is not None and not filename.lower().endswith(".gguf"):
        problems.append(f"{filename!r} is not a .gguf file")
    if problems:
        raise BadModelRefError(
            f"cannot read the model reference {ref!r}: {'; '.join(problems)}",
            hint="Write owner/name, owner/name:QUANT (e.g. bartowski/Qwen3-8B-GGUF:Q4_K_M) "
            "or owner/name/FILE.gguf.",
        )
    return PullRef(repo, quant, filename)


def disk_free(path: Path) -> int:
    """Free bytes on the file system holding ``path`` (the seam tests replace)."""
    return shutil.disk_usage(hf_cache.existing_ancestor(path)).free


def pull(
    ref: str | PullRef,
    *,
    progress: ProgressCallback | None = None,
    offline: bool | None = None,
    mmproj: bool = True,
    free_space: Callable[[Path], int] | None = None,
) -> PulledModel:
    """Make sure the model ``ref`` names is in the HF cache; download what is missing.

    Args:
        ref: ``owner/name[:QUANT]`` or ``owner/name/FILE.gguf`` (or a parsed ``PullRef``).
        progress: called with a ``PullProgress`` as bytes arrive (from this thread). Raising
            from it (``KeyboardInterrupt``, a TUI's cancel) stops the pull; the bytes already
            downloaded are kept and the next pull resumes from them.
        offline: True: only the cache; False: ask the Hub; None: ``HF_HUB_OFFLINE`` decides.
        mmproj: also get the repo's vision projector (``mmproj*.gguf``) when it has one.
        free_space: free bytes for a path (default :func:`disk_free`).

    Raises:
        BadModelRefError: the reference cannot be read.
        QuantNotFoundError: no such quant/file in the repo (the message lists what there is).
        HubAuthError: gated or private repo without a token that has access.
        HubNotFoundError: no such repo.
        HubOfflineError: offline and the model is not (fully) cached.
        HubNetworkError: the Hub unreachable and nothing cached, or downloads keep failing.
        NotEnoughDiskError: less free space than the files still missing.
        ChecksumMismatchError: a downloaded file does not match the Hub's sha256 (deleted).
        HubError: anything else the Hub or the cache folder got wrong (in words).
    """
    parsed = ref if isinstance(ref, PullRef) else parse_pull_ref(ref)
    cache_dir = hf_env.hub_cache_dir()
    if offline if offline is not None else hf_env.offline():
        return _from_cache(parsed, cache_dir, mmproj, progress, why="offline (HF_HUB_OFFLINE)")
    try:
        listing = remote_listing(parsed.repo, DEFAULT_REVISION)
    except HubUnreachableError as unreachable:
        try:
            return _from_cache(
                parsed,
                cache_dir,
                mmproj,
                progress,
                why=f"the Hub is unreachable ({unreachable.reason})",
            )
        except HubOfflineError:
            raise translate(unreachable.error, repo=parsed.repo) from None
    commit = listing.commit
    selection = select(
        parsed.repo, listing.files, quant=parsed.quant, filename=parsed.filename, mmproj=mmproj
    )
    unsized = [f.path for f in selection.files if f.size is None]
    if unsized:
        raise HubError(
            f"the Hub's listing of {parsed.repo} gives no size for {', '.join(unsized)}: "
            "homelab cannot check the download",
            hint="Try again later, or fetch the file with `hf download`.",
        )
    _check_disk(parsed.repo, commit, selection, cache_dir, free_space or disk_free)
    return _download(parsed, commit, selection, cache_dir, progress)


def _check_disk(
    repo: str, commit: str, selection: Selection, cache_dir: Path, free_space: Callable[[Path], int]
) -> None:
    needed = 0
    for file in selection.files:
        if not hf_cache.is_cached(cache_dir, repo, commit, file):
            needed += (file.size or 0) - hf_cache.present_bytes(cache_dir, repo, file)
    if needed <= 0:
        return
    free = free_space(cache_dir)
    if needed > free:
        raise NotEnoughDiskError(
            needed=needed, free=free, where=str(hf_cache.existing_ancestor(cache_dir))
        )


def _download(
    parsed: PullRef,
    commit: str,
    selection: Selection,
    cache_dir: Path,
    progress: ProgressCallback | None,
) -> PulledModel:
    from huggingface_hub import hf_hub_download

    from homelab.hub.blob_fetch import FetchTarget, fetch_blob  # httpx, only when fetching

    endpoint, token = hf_env.endpoint(), hf_env.token()
    total = sum(f.size or 0 for f in selection.files)
    on_disk = {f.path: hf_cache.present_bytes(cache_dir, parsed.repo, f) for f in selection.files}
    fetched_total = 0
    local: dict[str, Path] = {}
    count = len(selection.files)
    for index, file in enumerate(selection.files, start=1):
        size = file.size or 0

        def report(
            file_done: int,
            fetched_now: int,
            state: State = "downloading",
            name: str = file.path,
            size: int = size,
            index: int = index,
        ) -> None:
            nonlocal fetched_total
            on_disk[name] = file_done
            fetched_total += fetched_now
            if progress is not None:
                done = sum(on_disk.values())
                progress(
                    PullProgress(
                        name, state, file_done, size, done, total, fetched_total, index, count
                    )
                )

        if hf_cache.is_cached(cache_dir, parsed.repo, commit, file):
            report(size, 0, "cached")
        else:
            fetch_blob(FetchTarget(parsed.repo, commit, file, cache_dir, endpoint, token), report)
        try:
            path = hf_hub_download(
                parsed.repo,
                file.path,
                revision=DEFAULT_REVISION,
                cache_dir=cache_dir,
                endpoint=endpoint,
                token=token or False,
                library_name="homelab",
            )
        except Exception as error:
            raise translate(error, repo=parsed.repo, filename=file.path) from None
        local[file.path] = Path(path)
        report(size, 0, "done")
    return _result(parsed, commit, selection, local, fetched=fetched_total)


def _from_cache(
    parsed: PullRef, cache_dir: Path, mmproj: bool, progress: ProgressCallback | None, *, why: str
) -> PulledModel:
    """The model from the cache alone; ``why`` says why the Hub is not asked.

    Raises:
        HubOfflineError: the repo, the quant or one of its parts is not cached.
    """
    listing = cached_listing(parsed.repo, DEFAULT_REVISION, why)
    if listing is None:
        raise HubOfflineError(
            f"{why}, and nothing of {parsed.repo} is in the cache ({cache_dir})",
            hint="Run `homelab pull` once while online (unset HF_HUB_OFFLINE), or check HF_HOME / HF_HUB_CACHE.",
        )
    commit, files = listing.commit, listing.files
    try:
        selection = select(
            parsed.repo, files, quant=parsed.quant, filename=parsed.filename, mmproj=mmproj
        )
    except QuantNotFoundError as missing:
        cached = describe_quants(available_quants(files))
        raise HubOfflineError(
            f"{why}, and {parsed.quant or parsed.filename or 'no GGUF model'} of {parsed.repo} "
            f"is not in the cache; cached: {', '.join(cached) or 'no GGUF model files'}",
            hint="Pull it while online, or use a cached quant.",
        ) from missing
    total = sum(f.size or 0 for f in selection.files)
    local = {}
    done = 0
    for index, file in enumerate(selection.files, start=1):
        local[file.path] = hf_cache.snapshot_path(cache_dir, parsed.repo, commit, file.path)
        size = file.size or 0
        done += size
        if progress is not None:
            for state in ("cached", "done"):
                progress(
                    PullProgress(
                        file.path, state, size, size, done, total, 0, index, len(selection.files)
                    )
                )
    return _result(
        parsed,
        commit,
        selection,
        local,
        fetched=0,
        from_cache=True,
        note=f"{why}: using cached files",
    )


def _result(
    parsed: PullRef,
    commit: str,
    selection: Selection,
    local: dict[str, Path],
    *,
    fetched: int,
    from_cache: bool = False,
    note: str | None = None,
) -> PulledModel:
    return PulledModel(
        paths=tuple(local[f.path] for f in selection.model.files),
        repo=parsed.repo,
        revision=commit,
        quant=selection.model.tag,
        mmproj=local[selection.mmproj.path] if selection.mmproj else None,
        from_cache=from_cache,
        fetched=fetched,
        note=note,
    )
