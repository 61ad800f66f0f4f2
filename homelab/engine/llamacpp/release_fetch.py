"""Download the assets of one llama.cpp GitHub release, resumable and checked by sha256.

GitHub's REST API answers ``GET {api}/repos/ggml-org/llama.cpp/releases/tags/{tag}`` with
the release's assets, each with its ``name``, ``size``, ``browser_download_url`` and a
``digest`` (``"sha256:<hex>"``, which GitHub computes itself on upload). Each asset is
streamed to ``NAME.partial`` beside its final place; when a partial is there from an earlier
attempt the download resumes from its end with an HTTP ``Range`` request (``206`` appends;
a server that answers ``200`` sends the whole file, so the partial starts over). The file
takes its final name only once its sha256 matches the digest; a mismatch deletes it.

``HOMELAB_RELEASE_API`` points the API at a stand-in (tests, a mirror); the download URLs
are whatever the API names. Every failure is an :class:`~homelab.errors.EngineError` that
says which server could not be reached or what it answered, with the next step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from homelab import __version__
from homelab.engine.llamacpp.build_steps import ProgressFn
from homelab.engine.llamacpp.source import sha256_file
from homelab.errors import EngineError

API_ENV_VAR = "HOMELAB_RELEASE_API"
GITHUB_API = "https://api.github.com"
REPO = "ggml-org/llama.cpp"
BUILD_INSTEAD = (
    "or build the engine here instead (from source fetched from PyPI, not GitHub): "
    "`homelab engine build --cuda`"
)
PROGRESS_STEP_BYTES = 1 << 20
_NO_CONNECTION = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.UnsupportedProtocol,
    httpx.InvalidURL,
)
"""Failures before any answer: the server is not reachable (trying again at once is no use)."""
ATTEMPTS = 3
"""Tries per asset when the connection breaks off midway (each resumes where the last stopped)."""


@dataclass(frozen=True)
class Asset:
    """One file of a release, as GitHub's API lists it."""

    name: str
    size: int
    sha256: str | None  # lower-case hex; None when the API gives no sha256 digest
    url: str


def api_base() -> str:
    """The GitHub API root: ``HOMELAB_RELEASE_API`` when set, else api.github.com."""
    return (os.environ.get(API_ENV_VAR, "").strip() or GITHUB_API).rstrip("/")


def _server_name() -> str:
    """How an error names the release server: github.com, or the stand-in and its setting."""
    base = api_base()
    return "github.com" if base == GITHUB_API else f"the release server {base} ({API_ENV_VAR})"


def open_client() -> httpx.Client:
    """An HTTP client for the API and the downloads (they redirect to GitHub's file host).

    Proxy settings from the environment apply (``HTTPS_PROXY``...), as for any download."""
    return httpx.Client(
        follow_redirects=True,
        timeout=httpx.Timeout(30.0, connect=15.0),
        headers={"User-Agent": f"homelab/{__version__}"},
    )


def _said(problem: Exception) -> str:
    """An exception's words, or its class name when it has none (httpx's often have none)."""
    return str(problem) or type(problem).__name__


def unreachable(problem: Exception) -> EngineError:
    """The error for a server that could not be reached at all (offline, DNS, refused)."""
    return EngineError(
        f"{_server_name()} could not be reached ({_said(problem)}), so "
        "llama.cpp's prebuilt release could not be fetched",
        hint="check this machine's network connection (and proxy settings) and run it again; "
        + BUILD_INSTEAD,
        title="Release server unreachable",
    )


def http_error(response: httpx.Response, what: str) -> EngineError:
    """The error for an HTTP answer that is not the file or list asked for."""
    code = response.status_code
    spent = response.headers.get("x-ratelimit-remaining") == "0"
    if code == 429 or (code == 403 and spent):
        reset = response.headers.get("x-ratelimit-reset", "")
        when = time.strftime("%H:%M", time.localtime(int(reset))) if reset.isdigit() else None
        return EngineError(
            f"GitHub's rate limit for this address is spent (HTTP {code} for {what}); "
            "without a login GitHub allows 60 API requests an hour",
            hint=f"run it again after {when or 'a while'}; {BUILD_INSTEAD}",
            title="GitHub rate limit",
        )
    if code == 404:
        return EngineError(
            f"{what} is not there: {response.url.host} answered 404 Not Found",
            hint=f"the release may have been withdrawn or renamed; {BUILD_INSTEAD}",
            title="Release asset missing",
        )
    return EngineError(
        f"{response.url.host} answered HTTP {code} {response.reason_phrase} for {what}",
        hint=f"run it again later; {BUILD_INSTEAD}",
        title="Release download failed",
    )


def release_assets(client: httpx.Client, tag: str) -> dict[str, Asset]:
    """The assets of release ``tag`` of ggml-org/llama.cpp, by name."""
    url = f"{api_base()}/repos/{REPO}/releases/tags/{tag}"
    try:
        response = client.get(
            url,
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"},
        )
    except (httpx.HTTPError, httpx.InvalidURL) as problem:
        raise unreachable(problem) from None
    if response.status_code != 200:
        raise http_error(response, f"llama.cpp's release {tag}")
    try:
        listed = response.json()["assets"]
        return {a["name"]: _asset(a) for a in listed if isinstance(a, dict) and "name" in a}
    except (ValueError, KeyError, TypeError) as problem:
        raise EngineError(
            f"{_server_name()} answered something that is not a release's asset list "
            f"for {tag} ({type(problem).__name__}: {problem})",
            hint=f"run it again later; {BUILD_INSTEAD}",
            title="Release download failed",
        ) from None


def _asset(entry: dict[str, object]) -> Asset:
    """One API asset entry; the digest kept only when it is a sha256 one."""
    digest = entry.get("digest")
    sha256 = None
    if isinstance(digest, str) and digest.lower().startswith("sha256:"):
        sha256 = digest[len("sha256:") :].strip().lower() or None
    size = entry["size"]
    if not isinstance(size, int):
        raise TypeError(f"asset size {size!r} is not a number")
    return Asset(str(entry["name"]), size, sha256, str(entry["browser_download_url"]))


def download(
    client: httpx.Client,
    asset: Asset,
    folder: Path,
    progress: ProgressFn,
    *,
    span: tuple[int, int] | None = None,
) -> Path:
    """``folder/NAME``, verified: kept from an earlier run, or downloaded (resumed) now.

    ``span`` is (bytes of the assets before this one, bytes of them all), so that progress
    is a fraction of the whole fetch; None: of this asset alone.

    Raises:
        EngineError: no sha256 digest to check against, the server unreachable or refusing,
            the connection lost ``ATTEMPTS`` times (the partial is kept: the next run resumes),
            or the file not matching its digest (then it is deleted).
    """
    if asset.sha256 is None:
        raise no_digest(asset)
    target = folder / asset.name
    if target.exists():
        if sha256_file(target) == asset.sha256:
            return target
        target.unlink()
    partial = target.with_name(target.name + ".partial")
    before, total = span or (0, asset.size)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _stream(
                client, asset, partial, lambda got: _report(progress, asset, got, before, total)
            )
            break
        except _NO_CONNECTION as problem:
            raise unreachable(problem) from None
        except (httpx.HTTPError, _Cut) as problem:
            if attempt == ATTEMPTS:
                got = partial.stat().st_size if partial.exists() else 0
                raise EngineError(
                    f"the download of {asset.name} broke off at {got / 1e6:.0f} of "
                    f"{asset.size / 1e6:.0f} MB ({_said(problem)})",
                    hint="run it again: it resumes where it stopped",
                    title="Download interrupted",
                ) from None
            progress(None, f"the download of {asset.name} broke off ({_said(problem)}); resuming")
    actual = sha256_file(partial)
    if actual != asset.sha256:
        partial.unlink()
        raise EngineError(
            f"{asset.name} has sha256 {actual}, but GitHub lists {asset.sha256} for it; "
            "the download was deleted",
            hint="run it again to download it afresh; if it fails again, something between "
            f"this machine and GitHub alters the file: {BUILD_INSTEAD}",
            title="Download did not verify",
        )
    os.replace(partial, target)
    return target


def missing_asset(name: str, tag: str) -> EngineError:
    """The error for a file the release does not list."""
    return EngineError(
        f"llama.cpp's release {tag} has no asset {name}",
        hint=f"the release may have been withdrawn or changed; {BUILD_INSTEAD}",
        title="Release asset missing",
    )


def no_digest(asset: Asset) -> EngineError:
    """The error for an asset GitHub lists without a sha256 digest (nothing to check it by)."""
    return EngineError(
        f"the release lists no sha256 digest for {asset.name}, so homelab cannot check the "
        "download and will not install it",
        hint=BUILD_INSTEAD,
        title="Download cannot be verified",
    )


def _report(progress: ProgressFn, asset: Asset, got: int, before: int, total: int) -> None:
    """Progress of the whole fetch after ``got`` bytes of ``asset``."""
    fraction = min((before + got) / total, 1.0) if total > 0 else None
    progress(fraction, f"downloading {asset.name}: {got / 1e6:.0f} of {asset.size / 1e6:.0f} MB")


class _Cut(Exception):
    """The body ended before the asset's size without an error from the connection."""


def _stream(
    client: httpx.Client, asset: Asset, partial: Path, on_bytes: Callable[[int], None]
) -> None:
    """Download ``asset`` into ``partial``, resuming from the bytes already there.

    ``on_bytes(bytes so far)`` is called as the file grows (about once per percent).

    Raises:
        httpx.HTTPError, _Cut: the connection failed or broke off (what arrived stays).
        EngineError: the server answered with an error, or with the wrong part of the file.
    """
    have = partial.stat().st_size if partial.exists() else 0
    if have > asset.size:  # not a prefix of this asset: start over
        partial.unlink()
        have = 0
    if have == asset.size:
        return  # complete; the caller checks its digest
    headers = {"Accept-Encoding": "identity"}  # the file's own bytes, so offsets mean bytes
    if have:
        headers["Range"] = f"bytes={have}-"
    with client.stream("GET", asset.url, headers=headers) as response:
        if have and response.status_code == 416:  # the range fits no longer
            partial.unlink()
        else:
            have = _write_body(response, asset, partial, have, on_bytes)
    if not partial.exists():
        _stream(client, asset, partial, on_bytes)  # after a 416: once more, from the start
    elif have < asset.size:
        raise _Cut(f"the server sent {have} of {asset.size} bytes")


def _write_body(
    response: httpx.Response,
    asset: Asset,
    partial: Path,
    have: int,
    on_bytes: Callable[[int], None],
) -> int:
    """Append (``206``) or write afresh (``200``) the answer's body; the bytes ``partial`` holds."""
    if have and response.status_code == 200:
        have = 0  # the server sends the whole file: the partial starts over
    elif have and response.status_code == 206:
        sent = response.headers.get("content-range", "")
        if not sent.startswith(f"bytes {have}-"):
            partial.unlink()
            raise EngineError(
                f"resuming {asset.name} at byte {have}, the server sent {sent!r} instead",
                hint="run it again: it downloads the file afresh",
                title="Release download failed",
            )
    elif response.status_code != 200:
        raise http_error(response, f"{asset.name} of llama.cpp's release")
    step = max(asset.size // 100, PROGRESS_STEP_BYTES)
    shown = have
    with partial.open("ab" if have else "wb") as out:
        for block in response.iter_bytes():  # as it arrives, so a cut loses nothing
            out.write(block)
            have += len(block)
            if have - shown >= step or have >= asset.size:
                on_bytes(have)
                shown = have
    return have
