"""A ``ByteSource`` over HTTP range requests: a GGUF header read off the Hub, not downloaded.

The Hub answers ``/{repo}/resolve/{revision}/{file}``; for a large (LFS or Xet) file it
redirects to a CDN, which serves ``Range: bytes=a-b`` with ``206 Partial Content``. The
header reader asks through a ``ByteCursor`` in a few growing reads, so a plan costs a
handful of round trips and about the header's own size in bytes.

Headers come from huggingface_hub's ``build_hf_headers``, with the token that
``homelab.hub.hf_env`` reads when used (not when imported), so ``HF_TOKEN`` set by a
script or a test applies. The token goes to the Hub only: httpx drops
``Authorization`` on a redirect to another host (the CDN), and so do later reads sent
straight to the redirected address.

Every failure becomes a ``HubError`` subclass (:mod:`homelab.hub.errors`) with a
sentence and a next step: 401/403 (gated or private), 404, the network, a server that
ignores ``Range`` (answering a range request with the whole multi-gigabyte file is
refused, not downloaded).
"""

from __future__ import annotations

import re
import time
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit

import httpx

from homelab import __version__
from homelab.hub import hf_env
from homelab.hub.errors import (
    HubError,
    HubNetworkError,
    status_error,
)

RETRIES = 2
"""Extra attempts for a dropped connection or a 5xx/429 answer (each resumes where it stopped)."""
RETRY_WAIT_S = 0.5
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$", re.IGNORECASE)


class RangeNotSupportedError(HubError):
    """The server ignored ``Range`` and would send the whole file."""

    title = "Range requests not supported"


def hub_headers(token: str | None) -> dict[str, str]:
    """Request headers huggingface_hub would send (its user agent; ``Authorization`` with
    ``token``), plus ``Accept-Encoding: identity`` so sizes and byte ranges refer to the
    file itself, not a compressed body."""
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers(
        token=token or False, library_name="homelab", library_version=__version__
    )
    headers["Accept-Encoding"] = "identity"
    return headers


def for_host(headers: dict[str, str], url: str, hub_url: str) -> dict[str, str]:
    """``headers`` for a request to ``url``, without ``Authorization`` when ``url`` is on
    another host than ``hub_url`` (a CDN address the Hub redirected to): the token is for
    the Hub only."""
    if _origin(url) == _origin(hub_url):
        return headers
    return {k: v for k, v in headers.items() if k.lower() != "authorization"}


class HttpRangeSource:
    """Random access to a file over HTTP: ``HEAD`` for its size, ``GET`` with ``Range`` to read.

    Use it as a context manager (or call ``close``) when it made its own client.
    ``requests`` and ``bytes_received`` count what it cost.
    """

    def __init__(
        self,
        url: str,
        *,
        size: int | None = None,
        client: httpx.Client | None = None,
        label: str | None = None,
        repo_id: str | None = None,
    ) -> None:
        """
        Args:
            url: the file's URL (a Hub resolve URL, a CDN URL, any range-capable server).
            size: the file's size when already known (from the repo listing): saves the HEAD.
            client: an ``httpx.Client`` to share between files; default: one of its own.
            label: how messages name the file (default: the URL).
            repo_id: the repo the file belongs to, for the gated-repo hint.
        """
        self.url = url
        self.name = url
        self.label = label or url
        self.repo_id = repo_id
        self._size = size
        self._headers = hub_headers(hf_env.token())
        self._own_client = client is None
        self._client = client or httpx.Client(
            timeout=httpx.Timeout(30.0, connect=10.0), follow_redirects=True
        )
        self._read_url = url
        """Where reads go: the URL the first answer was redirected to (skips a round trip)."""
        self._headed = False
        self.requests = 0
        self.bytes_received = 0

    # -- ByteSource ---------------------------------------------------------------------

    def size(self) -> int | None:
        """The file's size; a ``HEAD`` (following redirects) the first time if not given.

        Raises:
            HubError: see ``_head``.
        """
        if self._size is None and not self._headed:
            self._head()
        return self._size

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``; fewer only where the file ends.

        A server may answer a range with fewer bytes than asked, or the connection may
        drop mid-body: the rest is asked for again (a bounded number of times), so a
        short result always means the end of the file.

        Raises:
            HubAuthError, HubNotFoundError: 401/403, 404.
            RangeNotSupportedError: the server answers ``200`` with the whole file.
            HubNetworkError: no connection, a timeout, or a broken body after retries.
            HubError: any other unexpected answer.
        """
        if offset < 0 or length < 0:
            raise ValueError(f"bad read: offset {offset}, length {length}")
        if self._size is not None:
            length = min(length, self._size - offset)
        if length <= 0:
            return b""
        out = bytearray()
        failures = 0
        while len(out) < length:
            start = offset + len(out)
            try:
                at_end = self._get_range(start, offset + length - 1, out)
            except _Retry as retry:
                failures += 1
                if failures > RETRIES:
                    raise HubNetworkError(
                        f"reading {self.label} at byte {start:,} failed {failures} times: {retry}",
                        hint="Check the connection and try again, or set HF_HUB_OFFLINE=1 "
                        "to use only what is cached.",
                    ) from None
                time.sleep(RETRY_WAIT_S * failures)
                continue
            failures = 0
            if at_end:
                break
        return bytes(out)

    # -- HTTP ---------------------------------------------------------------------------

    def _head(self) -> None:
        """``HEAD`` the URL, following redirects; remembers the size and where reads go.

        Raises:
            HubAuthError, HubNotFoundError, HubNetworkError, HubError: as for ``read``.
        """
        self.requests += 1
        try:
            response = self._client.head(self.url, headers=self._headers, follow_redirects=True)
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise self._network_error(exc) from None
        except httpx.HTTPError as exc:
            raise HubError(f"{self.label}: {_describe(exc)}") from None
        if response.status_code in (405, 501):  # no HEAD here: the size stays unknown
            self._headed = True
            return
        if response.status_code != 200:
            raise status_error(response, self.label, self.repo_id)
        first = response.history[0] if response.history else response
        size = _int_header(first, "X-Linked-Size")
        if size is None and response.headers.get("Content-Encoding", "identity") == "identity":
            size = _int_header(response, "Content-Length")
        self._headed = True
        self._size = size
        self._read_url = str(response.url)

    def _get_range(self, start: int, end: int, out: bytearray) -> bool:
        """GET bytes ``start..end`` (inclusive), appending to ``out``; True at the file's end."""
        url = self._read_url
        headers = {**for_host(self._headers, url, self.url), "Range": f"bytes={start}-{end}"}
        self.requests += 1
        try:
            with self._client.stream(
                "GET", url, headers=headers, follow_redirects=True
            ) as response:
                if response.status_code in (401, 403, 404, 410) and url != self.url:
                    # A signed CDN address may have expired: go through the Hub again.
                    self._read_url = self.url
                    raise _Retry(f"the redirected address answered {response.status_code}")
                if response.history:
                    self._read_url = str(response.url)
                return self._take_body(response, start, end, out)
        except httpx.ConnectError as exc:
            raise self._network_error(exc) from None
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise _Retry(_describe(exc)) from None
        except httpx.HTTPError as exc:
            raise HubError(f"{self.label}: {_describe(exc)}") from None

    def _take_body(self, response: httpx.Response, start: int, end: int, out: bytearray) -> bool:
        status = response.status_code
        if status == 416:  # the range starts at or past the end
            total = _content_range(response)[2]
            if total is not None:
                self._size = total
            return True
        if status == 200:
            return self._take_whole_body(response, start, end, out)
        if status in (429, 500, 502, 503, 504):
            raise _Retry(f"the server answered {status}")
        if status != 206:
            raise status_error(response, self.label, self.repo_id)
        first, last, total = _content_range(response)
        if first != start or last is None or last > end:
            raise HubError(
                f"{self.label}: asked for bytes {start}-{end}, the server sent "
                f"{response.headers.get('Content-Range')!r}",
                hint="The server's range support is broken; try again later.",
            )
        if total is not None and self._size is None:
            self._size = total
        want = last - start + 1
        before = len(out)
        for chunk in response.iter_bytes():
            self.bytes_received += len(chunk)
            out += chunk[: want - (len(out) - before)]
            if len(out) - before >= want:
                break
        if len(out) - before < want:
            raise _Retry(f"the connection closed after {len(out) - before:,} of {want:,} bytes")
        return total is not None and last >= total - 1

    def _take_whole_body(
        self, response: httpx.Response, start: int, end: int, out: bytearray
    ) -> bool:
        """A ``200`` to a range request: fine for a small file that the range covers, refused otherwise."""
        length = _int_header(response, "Content-Length")
        if start != 0 or length is None or length > end + 1:
            host = urlsplit(str(response.url)).netloc
            size = "" if length is None else f" ({length:,} bytes)"
            raise RangeNotSupportedError(
                f"{host} ignored the byte-range request for {self.label} and started sending the "
                f"whole file{size}; homelab reads only the header, so it stopped",
                hint="Use a server with HTTP range support (the Hugging Face Hub has it), or "
                "download the file and plan it from disk.",
            )
        for chunk in response.iter_bytes():
            self.bytes_received += len(chunk)
            out += chunk
        if len(out) != length:
            got = len(out)
            del out[:]  # start == 0: nothing was in ``out`` before this answer
            raise _Retry(f"the connection closed after {got:,} of {length:,} bytes")
        self._size = length
        return True

    def _network_error(self, exc: Exception) -> HubNetworkError:
        host = urlsplit(self.url).netloc
        return HubNetworkError(
            f"cannot reach {host} for {self.label}: {_describe(exc)}",
            hint="Check the network (and HF_ENDPOINT if you set it), or set HF_HUB_OFFLINE=1 "
            "to use only what is cached.",
        )

    # -- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Retry(Exception):
    """Internal: a failure worth another attempt (dropped connection, 5xx, 429)."""


def _content_range(response: httpx.Response) -> tuple[int | None, int | None, int | None]:
    """(first, last, total) of ``Content-Range``; ``None`` for what it does not say."""
    match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
    if match is None:
        return None, None, None
    first, last, total = match.groups()
    return (
        None if first is None else int(first),
        None if last is None else int(last),
        None if total in (None, "*") else int(total),
    )


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


def _int_header(response: httpx.Response, name: str) -> int | None:
    value = response.headers.get(name)
    return int(value) if value is not None and value.strip().isdigit() else None


def _describe(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
