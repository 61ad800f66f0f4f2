"""Model references (a local GGUF, ``REPO[:QUANT]``, ``REPO/FILE.gguf``) resolved to their
GGUF headers without downloading any weights.

Forms, after llama-server ``-hf``: ``owner/name`` (Q4_K_M, else Q8_0, else the first
GGUF), ``owner/name:QUANT``, ``owner/name/path/FILE.gguf``; a revision as
``owner/name@REV...`` or a Hub ``.../resolve/REV/FILE.gguf`` URL; anything that exists on
disk, or looks like a path, is a local file.

Where each part's header comes from, cheapest first:

1. the standard HF cache (``hf download``, ``homelab pull``, ``llama-server -hf``): the
   file is read locally, and its path is what llama-server will be given;
2. homelab's header cache (:mod:`homelab.hub.header_cache`), keyed by commit and ETag;
3. the Hub, with range requests for the header only (:mod:`homelab.hub.remote_source`),
   every split part, stored in the header cache for next time.

Listing the repo (:mod:`homelab.hub.repo_listing`; one API call: commit, sizes, sha256) pins
the commit, so all parts come from one revision. With ``HF_HUB_OFFLINE`` (or when the Hub
cannot be reached) the listing comes from the two caches, and nothing there is a
``HubOfflineError`` naming what is missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader, GgufModel
from homelab.gguf.local_path import gguf_file_name, on_disk, written_as_path
from homelab.gguf.model_file import check_parts, read_model, split_count
from homelab.gguf.reader import read_header
from homelab.gguf.source import LocalFileSource
from homelab.hub import hf_cache, hf_env
from homelab.hub.download import parse_pull_ref
from homelab.hub.errors import BadModelRefError, HubOfflineError, QuantNotFoundError
from homelab.hub.header_cache import HeaderCache, HeaderKey, read_header_capturing
from homelab.hub.quant_match import (
    QuantChoice,
    RemoteFile,
    available_quants,
    describe_quants,
    select,
)
from homelab.hub.repo_listing import DEFAULT_REVISION, RepoListing, list_repo

_HUB_PREFIX = r"(?:hf://|https?://(?:www\.)?(?:huggingface\.co|hf\.co)/|hf\.co/|huggingface\.co/)?"
_WITH_REVISION = re.compile(
    rf"^(?P<repo>{_HUB_PREFIX}[^/@:\s]+/[^/@:\s]+)@(?P<rev>[^/:\s]+)(?P<rest>.*)$"
)
_RESOLVE_URL = re.compile(
    rf"^(?P<repo>{_HUB_PREFIX}[^/@:\s]+/[^/@:\s]+)/(?:resolve|blob)/(?P<rev>[^/]+)/"
    r"(?P<file>[^?#]+)(?:[?#].*)?$"
)

Origin = Literal["local", "hf-cache", "header-cache", "remote"]


@dataclass(frozen=True, slots=True)
class ModelRef:
    """What the user named: a local ``path``, or a ``repo`` with a ``quant`` or ``filename``."""

    text: str
    path: Path | None = None
    repo: str | None = None
    quant: str | None = None
    filename: str | None = None
    revision: str = DEFAULT_REVISION

    @property
    def is_local(self) -> bool:
        return self.path is not None

    def asked(self) -> str:
        """``owner/name:Q4_K_M`` or ``owner/name/FILE.gguf`` (with ``@rev`` when not main)."""
        if self.path is not None:
            return str(self.path)
        rev = "" if self.revision == DEFAULT_REVISION else f"@{self.revision}"
        tail = f":{self.quant}" if self.quant else f"/{self.filename}" if self.filename else ""
        return f"{self.repo}{rev}{tail}"


@dataclass(frozen=True, slots=True)
class PartOrigin:
    """Where one part's header came from, and what fetching it cost."""

    filename: str
    origin: Origin
    location: str
    """Local path, or the URL the header was (or once was) read from."""
    bytes_fetched: int = 0
    requests: int = 0


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A model's headers and how to name it: ``display`` is a path llama-server can load,
    or the resolve URL of the first part when the weights are not on this machine."""

    model: GgufModel
    display: str
    ref: ModelRef
    commit: str | None = None
    choice: QuantChoice | None = None
    parts: tuple[PartOrigin, ...] = ()
    offline_reason: str | None = None

    @property
    def bytes_fetched(self) -> int:
        return sum(p.bytes_fetched for p in self.parts)

    @property
    def is_downloaded(self) -> bool:
        return all(p.origin in ("local", "hf-cache") for p in self.parts)


def parse_model_ref(text: str, *, revision: str | None = None) -> ModelRef:
    """Read a model reference; ``revision`` applies to Hub references without ``@REV``.

    Raises:
        BadModelRefError: empty, or neither a path nor a valid Hub reference, or two
            different revisions.
    """
    stripped = text.strip()
    if not stripped:
        raise BadModelRefError(
            "the model reference is empty",
            hint="Give a .gguf path, owner/name:QUANT or owner/name/FILE.gguf.",
        )
    path = Path(stripped).expanduser()
    if on_disk(path) or _looks_like_path(stripped):
        return ModelRef(text, path=path)
    inline = None
    if match := _RESOLVE_URL.match(stripped):
        stripped, inline = f"{match['repo']}/{unquote(match['file'])}", unquote(match["rev"])
    elif match := _WITH_REVISION.match(stripped):
        stripped, inline = match["repo"] + match["rest"], unquote(match["rev"])
    if inline and revision and inline != revision:
        raise BadModelRefError(
            f"{text!r} names revision {inline!r}, but {revision!r} was also given"
        )
    parsed = parse_pull_ref(stripped)
    return ModelRef(
        text,
        repo=parsed.repo,
        quant=parsed.quant,
        filename=parsed.filename,
        revision=inline or revision or DEFAULT_REVISION,
    )


def _looks_like_path(text: str) -> bool:
    """A path, not a Hub reference: no ``owner/name`` shape, or a path-like start, or
    ``dir/file.gguf`` (a Hub file needs owner, name and file)."""
    return written_as_path(text) or "/" not in text or gguf_file_name(text)


def resolve_model_ref(ref: str | ModelRef) -> ResolvedModel:
    """The model ``ref`` (see the module, or a parsed ``ModelRef``) names, its headers read
    without downloading weights; offline (``HF_HUB_OFFLINE``) from the caches only.

    Raises:
        BadModelRefError: the reference cannot be read.
        ModelFileError: a local file is missing or bad, or a remote header is not GGUF.
        QuantNotFoundError: the repo has no such quant or file (the message lists them).
        HubAuthError, HubNotFoundError, HubNetworkError: see ``HttpRangeSource``.
        HubOfflineError: offline, and a needed header is neither downloaded nor cached.
    """
    ref = parse_model_ref(ref) if isinstance(ref, str) else ref
    if ref.path is not None:
        model = read_model(ref.path)
        parts = tuple(PartOrigin(p.source_name, "local", p.source_name) for p in model.parts)
        return ResolvedModel(model, ref.text.strip(), ref, parts=parts)
    cache = HeaderCache()
    listing = list_repo(ref.repo or "", ref.revision, cache=cache)
    try:
        selection = select(
            listing.repo, listing.files, quant=ref.quant, filename=ref.filename, mmproj=False
        )
    except QuantNotFoundError as missing:
        if listing.offline_reason is None:
            raise
        raise _offline_error(listing, ref.asked()) from missing
    return read_choice(listing, selection.model, cache=cache, ref=ref)


def resolve_model(ref: str) -> GgufModel:
    """Just the headers of what ``ref`` names (``resolve_model_ref(ref).model``): the
    resolver the presets' fit check takes.

    Raises:
        HomelabError: see ``resolve_model_ref``.
    """
    return resolve_model_ref(ref).model


def _offline_error(listing: RepoListing, asked: str) -> HubOfflineError:
    there = describe_quants(available_quants(listing.files))
    return HubOfflineError(
        f"{listing.offline_reason}, and {asked} is on this machine neither downloaded "
        f"(HF cache {hf_env.hub_cache_dir()}) nor as a cached header; "
        f"cached: {', '.join(there) or 'nothing of this repo'}",
        hint="Run the same command once online (a plan reads only the header), or "
        f"`homelab pull {asked}`.",
    )


def read_choice(
    listing: RepoListing,
    choice: QuantChoice,
    *,
    cache: HeaderCache | None = None,
    ref: ModelRef | None = None,
) -> ResolvedModel:
    """Read the header of every part of ``choice`` (HF cache, header cache, or range requests).

    Raises:
        HubOfflineError: the listing is offline and a part's header is not on this machine.
        ModelFileError: a header is not GGUF, or the parts do not belong together.
        HubAuthError, HubNotFoundError, HubNetworkError: see ``HttpRangeSource``.
    """
    import httpx

    cache = cache or HeaderCache()
    ref = ref or ModelRef(
        f"{listing.repo}:{choice.label}",
        repo=listing.repo,
        quant=choice.tag,
        revision=listing.revision,
    )
    headers: list[GgufHeader] = []
    origins: list[PartOrigin] = []
    with httpx.Client(timeout=httpx.Timeout(30.0, connect=10.0), follow_redirects=True) as client:
        for file in choice.files:
            header, origin = _read_part(listing, file, cache, client, ref)
            headers.append(header)
            origins.append(origin)
    model = _assemble(listing, choice, tuple(headers))
    if all(o.origin == "hf-cache" for o in origins):
        display = origins[0].location
    else:
        display = _resolve_url(listing.repo, choice.primary.path, listing.revision)
    return ResolvedModel(
        model, display, ref, listing.commit, choice, tuple(origins), listing.offline_reason
    )


def _read_part(
    listing: RepoListing, file: RemoteFile, cache: HeaderCache, client, ref: ModelRef
) -> tuple[GgufHeader, PartOrigin]:
    repo, commit = listing.repo, listing.commit
    snapshot = hf_cache.snapshot_path(hf_env.hub_cache_dir(), repo, commit, file.path)
    if hf_cache.is_cached(hf_env.hub_cache_dir(), repo, commit, file):
        with LocalFileSource(snapshot) as source:
            return read_header(source), PartOrigin(file.path, "hf-cache", str(snapshot))
    key = HeaderKey(repo, commit, file.path, hf_cache.etag_for(file))
    entry = cache.get(key)
    if entry is None and listing.offline_reason is not None:
        entry = cache.find(repo, commit, file.path)
    if entry is not None:
        try:
            return entry.parse(), PartOrigin(file.path, "header-cache", entry.url)
        except ModelFileError:
            cache.discard(entry.key)  # damaged: fetch it again below (when online)
    if listing.offline_reason is not None:
        raise _offline_error(listing, f"{repo}/{file.path} (for {ref.asked()})")
    from homelab.hub.remote_source import HttpRangeSource  # httpx, only for remote headers

    url = _resolve_url(repo, file.path, commit)
    with HttpRangeSource(
        url, size=file.size, client=client, label=f"{repo}/{file.path}", repo_id=repo
    ) as remote:
        header, data = read_header_capturing(remote)
    cache.put(key, data, header.file_size, url)
    return header, PartOrigin(file.path, "remote", url, remote.bytes_received, remote.requests)


def _assemble(
    listing: RepoListing, choice: QuantChoice, parts: tuple[GgufHeader, ...]
) -> GgufModel:
    """The parts as one model, checked like local split parts.

    Raises:
        ModelFileError: the first part's ``split.count`` disagrees with the files the repo
            lists for this quant, or the parts' numbering or tensor counts disagree.
    """
    count = split_count(parts[0])
    if count != len(parts):
        raise ModelFileError(
            f"{listing.repo}/{choice.primary.path} says it is one of {count} parts "
            f"(split.count), but the repo has {len(parts)} file(s) for {choice.label}",
            hint="The upload looks incomplete or misnamed; pick another quant.",
        )
    if count > 1:
        check_parts(parts, count)
    return GgufModel(parts)


def _resolve_url(repo: str, filename: str, revision: str) -> str:
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo, filename, revision=revision, endpoint=hf_env.endpoint())
