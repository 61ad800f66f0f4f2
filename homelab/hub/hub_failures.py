"""The ways talking to the Hugging Face Hub fails, as ``HomelabError``s, and which one an
HTTP error answer means.

Every Hub failure is a :class:`HubError`; its kinds say what the person can do next:
get access (:class:`HubAuthError`), fix a name (:class:`HubNotFoundError`), check the
network (:class:`HubNetworkError`), go online (:class:`HubOfflineError`).
:func:`status_error` reads an error answer (status, and the Hub's ``X-Error-Code`` /
``X-Error-Message``) as one of them, for any code that talks HTTP to the Hub itself.
:mod:`homelab.hub.hub_errors` adds the download's own failures and translates
huggingface_hub's exceptions into this family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from homelab.errors import HomelabError
from homelab.hub import hf_env

if TYPE_CHECKING:
    import httpx

__all__ = [
    "HubAuthError",
    "HubError",
    "HubNetworkError",
    "HubNotFoundError",
    "HubOfflineError",
    "status_error",
]


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
        what = {"RepoNotFound": "no such repo (or it is private)",
                "RevisionNotFound": "no such revision",
                "EntryNotFound": "no such file"}.get(code, "not found")
        return HubNotFoundError(
            f"{label}: {what} ({status}){said}",
            hint="Check the repo name and the file or quant (`homelab quants REPO` lists them); "
            "a private repo needs HF_TOKEN.",
        )
    return HubError(f"{label}: the server answered {status} {response.reason_phrase}{said}")
