"""What can go wrong getting a model, as ``HomelabError``s; huggingface_hub's exceptions translated.

The classes extend the Hub error family of :mod:`homelab.hub.remote_source` (``HubError``
and its auth / not-found / network / offline kinds) with the download's own failures:
an unknown quant, too little disk, a checksum that does not match. :func:`translate`
turns whatever huggingface_hub (or the HTTP layer under it) raised into one of them, so
no library exception reaches the person at the keyboard.
"""

from __future__ import annotations

from collections.abc import Sequence

from homelab.errors import ExitCode, UsageError
from homelab.hub import hf_env
from homelab.hub.remote_source import (
    HubAuthError,
    HubError,
    HubNetworkError,
    HubNotFoundError,
    HubOfflineError,
)
from homelab.units import format_bytes

__all__ = [
    "BadModelRefError",
    "ChecksumMismatchError",
    "HubAuthError",
    "HubError",
    "HubNetworkError",
    "HubNotFoundError",
    "HubOfflineError",
    "NotEnoughDiskError",
    "QuantNotFoundError",
    "auth_hint",
    "translate",
]


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
    return bool(names & {"TransportError", "TimeoutException", "NetworkError", "RemoteProtocolError"})


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
            message = f"{repo} is gated and the Hub did not accept your token ({status}): is it valid?"
        else:
            message = f"{repo} is gated: downloading it needs a Hugging Face token ({status})"
        return HubAuthError(message, hint=auth_hint(repo, gated=True))
    if isinstance(error, hf.RepositoryNotFoundError):
        if _status(error) == 401 or not has_token:
            return HubNotFoundError(
                f"no repository {repo} on {hf_env.endpoint()}, or it is private and you are not logged in",
                hint="Check the name (owner/name). If it is private: " + auth_hint(repo, gated=False),
            )
        return HubNotFoundError(
            f"no repository {repo} on {hf_env.endpoint()} that your token can see",
            hint="Check the name (owner/name), and that the token's account has access to it.",
        )
    if isinstance(error, hf.RevisionNotFoundError):
        return HubNotFoundError(f"{repo} has no such revision", hint="Leave the revision out to use main.")
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
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return HubError(f"the Hub answered an error for {what}: {first_line}")
    if isinstance(error, OSError):
        return HubError(
            f"could not write {what} into the cache {hf_env.hub_cache_dir()}: {error}",
            hint="Check that the folder is writable and the disk is not full.",
        )
    return HubError(f"{what}: {type(error).__name__}: {error}")
