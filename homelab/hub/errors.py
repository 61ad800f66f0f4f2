"""Everything that can go wrong getting a model, as ``HomelabError``s.

Every Hub failure is a :class:`HubError`; its kinds say what the person can do next:
get access (:class:`HubAuthError`), fix a name (:class:`HubNotFoundError`), check the
network (:class:`HubNetworkError`), go online (:class:`HubOfflineError`). The download
adds its own failures: an unknown quant, too little disk, a checksum that does not match.
:func:`status_error` reads an HTTP error answer (status, and the Hub's ``X-Error-Code`` /
``X-Error-Message``) as one of them; :func:`translate` turns whatever huggingface_hub (or
the HTTP layer under it) raised into one, so no library exception reaches the person.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from homelab.errors import ExitCode, HomelabError, UsageError
from homelab.hub import hf_env
from homelab.units import format_bytes

if TYPE_CHECKING:
    import httpx


class HubError(HomelabError):
    """Talking to the Hugging Face Hub (or the server behind ``HF_ENDPOINT``) failed."""

    title = "Hugging Face Hub"


class HubAuthError(HubError):
    """401/403: the repo is gated or private and the request's token (or no token) is not enough."""

    title = "Authentication needed"


class HubNotFoundError(HubError):
    """404: no such repo, revision or file (or a private repo the token cannot see)."""

    title = "Not found on the Hub"


class HubNetworkError(HubError):
    """The server could not be reached, or the connection broke and retries did not help."""

    title = "Network error"


class HubOfflineError(HubError):
    """``HF_HUB_OFFLINE`` is set and what is needed is not cached locally."""

    title = "Offline"


def status_error(response: httpx.Response, label: str, repo_id: str | None) -> HubError:
    """The ``HubError`` for an HTTP error answer, using the Hub's ``X-Error-Code`` when sent."""
    status = response.status_code
    code = response.headers.get("X-Error-Code", "")
    detail = response.headers.get("X-Error-Message", "")
    said = f" ({detail})" if detail else ""
    page = f"{hf_env.endpoint()}/{repo_id}" if repo_id else "the model's page"
    if code == "GatedRepo" or status == 403:
        return HubAuthError(
            f"{label}: the Hub refused access ({status}){said}; the repo is gated or private",
            hint=f"Accept the model's terms at {page} while logged in, then log in here with "
            "`hf auth login` or set HF_TOKEN to a token of that account.",
        )
    if status == 401 and code not in ("RepoNotFound", "EntryNotFound", "RevisionNotFound"):
        return HubAuthError(
            f"{label}: the Hub asks for authentication (401){said}; the repo is gated or private",
            hint=f"Log in with `hf auth login` or set HF_TOKEN; for a gated model accept its "
            f"terms at {page} first.",
        )
    if status in (401, 404, 410):
        what = {
            "RepoNotFound": "no such repo (or it is private)",
            "RevisionNotFound": "no such revision",
            "EntryNotFound": "no such file",
        }.get(code, "not found")
        return HubNotFoundError(
            f"{label}: {what} ({status}){said}",
            hint="Check the repo name and the file or quant (`homelab quants REPO` lists them); "
            "a private repo needs HF_TOKEN.",
        )
    return HubError(f"{label}: the server answered {status} {response.reason_phrase}{said}")


class BadModelRefError(UsageError):
    """The model reference is not ``owner/name``, ``owner/name:QUANT`` or ``owner/name/FILE.gguf``."""

    title = "Bad model reference"


class QuantNotFoundError(HubNotFoundError):
    """The repo exists but has no GGUF for the asked quant (or file); ``available`` lists what it has."""

    title = "Quant not found"

    def __init__(self, message: str, *, available: Sequence[str], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.available = tuple(available)


class NotEnoughDiskError(HubError):
    """The cache's file system has less free space than the files still to download."""

    title = "Not enough disk space"
    exit_code = ExitCode.FAILURE

    def __init__(self, *, needed: int, free: int, where: str) -> None:
        super().__init__(
            f"the download needs {format_bytes(needed)} ({needed:,} bytes) but {where} has only "
            f"{format_bytes(free)} ({free:,} bytes) free",
            hint="Free some space, or point HF_HOME (or HF_HUB_CACHE) at a bigger disk.",
        )
        self.needed = needed
        self.free = free


class ChecksumMismatchError(HubError):
    """A downloaded file's sha256 differs from the one the Hub's LFS metadata promised."""

    title = "Checksum mismatch"


def auth_hint(repo: str, *, gated: bool) -> str:
    """How to get access: accept the terms (gated), then a token via ``hf auth login`` or HF_TOKEN."""
    page = f"{hf_env.endpoint()}/{repo}"
    first = f"Accept the model's terms at {page} while logged in, then " if gated else ""
    how = "log in with `hf auth login` or set HF_TOKEN to a read token (https://huggingface.co/settings/tokens)."
    return first + (how if first else how[0].upper() + how[1:])


def _status(error: BaseException) -> int | None:
    response = getattr(error, "response", None)
    return getattr(response, "status_code", None)


def is_transport_error(error: BaseException) -> bool:
    """A connection / timeout / broken-body error of whichever HTTP library raised it."""
    from huggingface_hub.errors import OfflineModeIsEnabled

    if isinstance(error, OfflineModeIsEnabled):
        return False
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    names = {cls.__name__ for cls in type(error).__mro__}
    return bool(
        names & {"TransportError", "TimeoutException", "NetworkError", "RemoteProtocolError"}
    )


def translate(error: BaseException, *, repo: str, filename: str | None = None) -> HubError:
    """The ``HubError`` that says in words what huggingface_hub's ``error`` means.

    Args:
        error: what huggingface_hub (or its HTTP client) raised.
        repo: the repository being asked about.
        filename: the file, when the failure is about one file.
    """
    from huggingface_hub import errors as hf

    what = f"{repo}/{filename}" if filename else repo
    has_token = hf_env.token() is not None
    if isinstance(error, HubError):
        return error
    if isinstance(error, hf.GatedRepoError):
        status = _status(error)
        if status == 403:
            message = f"{repo} is gated and the token you use has not been granted access (403)"
        elif has_token:
            message = (
                f"{repo} is gated and the Hub did not accept your token ({status}): is it valid?"
            )
        else:
            message = f"{repo} is gated: downloading it needs a Hugging Face token ({status})"
        return HubAuthError(message, hint=auth_hint(repo, gated=True))
    if isinstance(error, hf.RepositoryNotFoundError):
        if _status(error) == 401 or not has_token:
            return HubNotFoundError(
                f"no repository {repo} on {hf_env.endpoint()}, or it is private and you are not logged in",
                hint="Check the name (owner/name). If it is private: "
                + auth_hint(repo, gated=False),
            )
        return HubNotFoundError(
            f"no repository {repo} on {hf_env.endpoint()} that your token can see",
            hint="Check the name (owner/name), and that the token's account has access to it.",
        )
    if isinstance(error, hf.RevisionNotFoundError):
        return HubNotFoundError(
            f"{repo} has no such revision", hint="Leave the revision out to use main."
        )
    if isinstance(error, hf.RemoteEntryNotFoundError):
        return HubNotFoundError(
            f"{what} does not exist on the Hub",
            hint=f"`homelab quants {repo}` lists the GGUF files the repo has.",
        )
    if isinstance(error, (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled)):
        return HubOfflineError(
            f"{what} is not in the local cache ({hf_env.hub_cache_dir()}) and the Hub is not being asked",
            hint="Unset HF_HUB_OFFLINE and run `homelab pull` while online.",
        )
    if is_transport_error(error):
        return HubNetworkError(
            f"cannot reach {hf_env.endpoint()} for {what}: {type(error).__name__}: {error}",
            hint="Check the network (and HF_ENDPOINT if you set it), then run the same command "
            "again: a download resumes where it stopped.",
        )
    if isinstance(error, hf.HfHubHTTPError):
        first_line = (
            str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        )
        return HubError(f"the Hub answered an error for {what}: {first_line}")
    if isinstance(error, OSError):
        return HubError(
            f"could not write {what} into the cache {hf_env.hub_cache_dir()}: {error}",
            hint="Check that the folder is writable and the disk is not full.",
        )
    return HubError(f"{what}: {type(error).__name__}: {error}")
