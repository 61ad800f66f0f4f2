"""A local stand-in for the Hugging Face Hub, speaking the part of its HTTP protocol
huggingface_hub (2.x) and llama-server ``-hf`` use, on 127.0.0.1.

Two listeners, like the real thing: the *Hub* (``.endpoint``, what ``HF_ENDPOINT`` points
at) and a *CDN* on another port, so the LFS redirect crosses origins exactly as
``huggingface.co`` → ``cdn-lfs``/``cas-bridge`` does (huggingface_hub then stops following
it on HEAD and drops the Authorization header on GET).

Hub routes (model repos only):

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` — ``model_info``;
  ``?blobs=true`` (``files_metadata=True``) adds size, blobId and ``lfs`` {sha256, size,
  pointerSize} to each sibling; ``?expand=`` trims the body.
- ``GET /api/models/{repo}/tree/{rev}[/{folder}]?recursive=&expand=`` — ``list_repo_tree``
  / ``list_repo_files``; ``POST /api/models/{repo}/paths-info/{rev}`` — ``get_paths_info``.
- ``GET /api/models/{repo}/refs`` — branches (what llama-server ``-hf`` asks first).
- ``HEAD|GET /{repo}/resolve/{rev}/{path}`` — LFS file: ``302`` to the CDN with
  ``X-Repo-Commit``, ``ETag`` and ``X-Linked-Etag`` (the sha256), ``X-Linked-Size``,
  ``Location``; plain git file: ``200``/``206`` with ``ETag`` = git blob sha1.
- CDN ``HEAD|GET /lfs/{repo}/{sha256}?filename=`` — the bytes, ``Range`` honoured
  (``206`` + ``Content-Range``, ``416`` when unsatisfiable), ``Accept-Ranges: bytes``.

Errors carry ``X-Error-Code`` / ``X-Error-Message`` as the Hub's do: ``RepoNotFound``
(404; 401 for a private repo asked without a token), ``RevisionNotFound`` (404),
``EntryNotFound`` (404, with ``X-Repo-Commit``), ``GatedRepo`` (401 without a token, 403
with a token that is not the one :meth:`HubStub.require_token` set).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .repo import StubFile, StubRepo
from .wire import (
    RecordedRequest,
    Reply,
    StubHandler,
    StubServer,
    byte_range,
    send_cut_json,
    send_error,
    send_head,
    send_json,
    write_body,
)

DEFAULT_REVISION_SHA = hashlib.sha1(b"homelab-hubstub").hexdigest()
SETTLE_TIMEOUT_S = 10.0
"""How long a reader of the request log waits for answers still being written."""


class HubStub:
    """The Hub on 127.0.0.1: a context manager; ``endpoint`` is the URL for ``HF_ENDPOINT``.

    Args:
        repos: ``{"owner/name": {"path/in/repo.gguf": bytes | Path, ...}}``.
        gated: repos whose files need :meth:`require_token`'s token (metadata stays public).
        private: repos invisible without that token.
        revision_sha: the commit every repo is at (``main`` resolves to it).
        throttle_bps: send file bytes at most this fast (bytes per second); None: as fast
            as the socket takes them (the default). :meth:`throttle` changes it any time.
    """

    def __init__(
        self,
        repos: dict[str, dict[str, bytes | Path]],
        *,
        gated: set[str] | frozenset[str] = frozenset(),
        private: set[str] | frozenset[str] = frozenset(),
        revision_sha: str = DEFAULT_REVISION_SHA,
        throttle_bps: int | None = None,
    ) -> None:
        if not re.fullmatch(r"[0-9a-f]{40}", revision_sha):
            raise ValueError(f"revision_sha must be 40 lowercase hex digits, got {revision_sha!r}")
        self.revision_sha = revision_sha
        self.repos = {
            repo_id: StubRepo.build(
                repo_id, files, gated=repo_id in gated, private=repo_id in private
            )
            for repo_id, files in repos.items()
        }
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._in_flight = 0
        self._cuts: dict[str, list[int]] = {}
        self._after: dict[str, list[tuple[int, Callable[[], None]]]] = {}
        self._corrupt: dict[str, int | None] = {}
        self._listing_faults: dict[str, list[int | None]] = {}
        self._token: str | None = None
        self._throttle_bps: int | None = None
        self.throttle(throttle_bps)
        self._servers: list[StubServer] = []
        self._threads: list[threading.Thread] = []
        self.endpoint = ""
        self.cdn_endpoint = ""

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Start both listeners (``with HubStub(...) as hub`` calls this)."""
        for host in ("hub", "cdn"):
            server = StubServer(self._dispatch, host)
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self.endpoint = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_endpoint = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def close(self) -> None:
        """Stop both listeners and drop every open connection."""
        for server in self._servers:
            server.shutdown()
            server.drop_all()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        self._servers.clear()
        self._threads.clear()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- fault injection -------------------------------------------------------------------

    def cut_after(self, filename: str, n_bytes: int, *, times: int = 1) -> None:
        """The next ``times`` GETs carrying ``filename``'s bytes send ``n_bytes`` of body, then drop."""
        with self._lock:
            self._cuts.setdefault(filename, []).extend([n_bytes] * times)

    def after_sending(self, filename: str, n_bytes: int, action: Callable[[], None]) -> None:
        """The next GET carrying ``filename``'s bytes calls ``action()`` (in the server's
        thread) once ``n_bytes`` of body are sent, then sends the rest: e.g. fill the disk
        the download goes to, at a known point of the transfer."""
        with self._lock:
            self._after.setdefault(filename, []).append((n_bytes, action))

    def corrupt(self, filename: str, *, times: int | None = None) -> None:
        """Serve ``filename`` with one byte flipped (sha256 no longer matches); ``times`` GETs or always."""
        with self._lock:
            self._corrupt[filename] = times

    def fail_listing(self, repo: str, status: int, *, times: int = 1) -> None:
        """The next ``times`` listings of ``repo`` (``GET /api/models/{repo}``, what
        ``model_info`` asks) answer ``status`` with an empty error body (e.g. a 500)."""
        with self._lock:
            self._listing_faults.setdefault(repo, []).extend([status] * times)

    def truncate_listing(self, repo: str, *, times: int = 1) -> None:
        """The next ``times`` listings of ``repo`` send half their JSON body, then drop the
        connection (the client sees a body shorter than its Content-Length)."""
        with self._lock:
            self._listing_faults.setdefault(repo, []).extend([None] * times)

    def hide_size(self, repo: str, filename: str) -> None:
        """The listing of ``repo`` names ``filename`` without its size (nor its LFS
        metadata): a size the client cannot know."""
        self.repos[repo].files[filename].size_listed = False

    def throttle(self, bytes_per_second: int | None) -> None:
        """Send file bodies (resolve and CDN GETs) at most ``bytes_per_second``; None: unthrottled.

        Read before every chunk, so it also slows down or frees a transfer under way: a
        test can keep a download slow enough to cancel it, then let the resume run fast.
        """
        if bytes_per_second is not None and bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be positive or None, got {bytes_per_second}")
        self._throttle_bps = bytes_per_second

    def require_token(self, token: str) -> None:
        """Gated and private repos answer only requests with ``Authorization: Bearer <token>``."""
        self._token = token

    # -- what tests read -------------------------------------------------------------------

    def file(self, repo: str, filename: str) -> StubFile:
        """The served file (its ``size``, ``sha256``, ``etag``, ``git_oid``)."""
        return self.repos[repo].files[filename]

    def resolve_url(self, repo: str, filename: str, revision: str = "main") -> str:
        """``{endpoint}/{repo}/resolve/{revision}/{filename}``, as huggingface_hub builds it."""
        return f"{self.endpoint}/{repo}/resolve/{quote(revision, safe='')}/{quote(filename)}"

    def settle(self, timeout: float = SETTLE_TIMEOUT_S) -> bool:
        """Wait until no request is being answered (each answered one is recorded); False
        if one is still going after ``timeout`` seconds (a client that stopped reading).

        A client can have read a whole answer before the server's thread records it, so
        every reader below waits for this first instead of reading a log still being written.
        """
        with self._settled:
            return self._settled.wait_for(lambda: self._in_flight == 0, timeout)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request answered so far, in order (a copy, read once the log settled)."""
        self.settle()
        with self._lock:
            return list(self._requests)

    def requests_for(self, filename: str, method: str | None = "GET") -> list[RecordedRequest]:
        """Recorded requests about ``filename`` (any host), of ``method`` unless None."""
        self.settle()
        with self._lock:
            return [
                r for r in self._requests if r.filename == filename and method in (None, r.method)
            ]

    def bytes_sent(self, filename: str | None = None) -> int:
        """Body bytes sent in all, or for ``filename`` only."""
        self.settle()
        with self._lock:
            return sum(r.bytes_sent for r in self._requests if filename in (None, r.filename))

    # -- dispatch --------------------------------------------------------------------------

    def _dispatch(self, handler: StubHandler, method: str) -> None:
        split = urlsplit(handler.path)
        segments = [unquote(s) for s in split.path.split("/")[1:]]
        query = parse_qs(split.query)
        context = {"repo": None, "filename": None}
        with self._lock:
            self._in_flight += 1
        try:
            if handler.server.host == "cdn":
                status, sent = self._cdn(handler, method, segments, query, context)
            else:
                status, sent = self._hub(handler, method, split.path, segments, query, context)
        except Reply as reply:
            status, sent = send_error(handler, method, reply), 0
        except (BrokenPipeError, ConnectionResetError):
            status, sent = 0, 0
        except BaseException:
            with self._settled:
                self._in_flight -= 1
                self._settled.notify_all()
            raise
        with self._settled:
            self._in_flight -= 1
            self._settled.notify_all()
            self._requests.append(
                RecordedRequest(
                    method=method,
                    host=handler.server.host,
                    path=unquote(split.path),
                    range=handler.headers.get("Range"),
                    status=status,
                    bytes_sent=sent,
                    authorization=handler.headers.get("Authorization"),
                    repo=context["repo"],
                    filename=context["filename"],
                )
            )

    def _hub(self, handler, method, raw_path, segments, query, context):  # type: ignore[no-untyped-def]
        if len(segments) >= 4 and segments[:2] == ["api", "models"]:
            repo_id = f"{segments[2]}/{segments[3]}"
            context["repo"] = repo_id
            rest = segments[4:]
            repo = self._visible_repo(repo_id, handler)
            if method == "GET" and not rest:
                return self._listing(handler, method, repo_id, self._info(repo, "main", query))
            if method == "GET" and len(rest) == 2 and rest[0] == "revision":
                return self._listing(handler, method, repo_id, self._info(repo, rest[1], query))
            if method == "GET" and rest == ["refs"]:
                branch = {
                    "name": "main",
                    "ref": "refs/heads/main",
                    "targetCommit": self.revision_sha,
                }
                return send_json(
                    handler, method, {"branches": [branch], "converts": [], "tags": []}
                )
            if method == "GET" and len(rest) >= 2 and rest[0] == "tree":
                return self._tree(handler, method, repo, raw_path, query)
            if method == "POST" and len(rest) == 2 and rest[0] == "paths-info":
                return self._paths_info(handler, repo, rest[1])
        if len(segments) >= 5 and segments[2] == "resolve" and method in ("GET", "HEAD"):
            repo_id = f"{segments[0]}/{segments[1]}"
            filename = "/".join(segments[4:])
            context["repo"], context["filename"] = repo_id, filename
            return self._resolve(handler, method, repo_id, segments[3], filename)
        raise Reply(404, "Not Found")

    def _listing(self, handler, method, repo_id, body):  # type: ignore[no-untyped-def]
        """A repo's listing, or the fault :meth:`fail_listing` / :meth:`truncate_listing` set."""
        with self._lock:
            faults = self._listing_faults.get(repo_id)
            fault = faults.pop(0) if faults else False
        if fault is False:
            return send_json(handler, method, body)
        if fault is not None:
            raise Reply(
                fault, "Internal Error - We're working hard to fix this as soon as possible!"
            )
        return send_cut_json(handler, body)

    def _visible_repo(self, repo_id: str, handler: StubHandler) -> StubRepo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise Reply(404, "Repository not found", "RepoNotFound")
        if repo.private and not self._authorized(handler):
            status = 401 if handler.headers.get("Authorization") is None else 404
            raise Reply(status, "Repository not found", "RepoNotFound")
        return repo

    def _authorized(self, handler: StubHandler) -> bool:
        return (
            self._token is not None
            and handler.headers.get("Authorization") == f"Bearer {self._token}"
        )

    def _commit(self, revision: str) -> str:
        if revision not in ("main", self.revision_sha):
            raise Reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return self.revision_sha

    def _info(
        self, repo: StubRepo, revision: str, query: dict[str, list[str]]
    ) -> dict[str, object]:
        blobs = query.get("blobs", ["false"])[0].lower() in ("1", "true")
        expand = query.get("expand") or None
        return repo.info(self._commit(revision), blobs=blobs, expand=expand)

    def _tree(self, handler, method, repo, raw_path, query):  # type: ignore[no-untyped-def]
        raw_rest = raw_path.split("/tree/", 1)[1]
        raw_revision, _, raw_folder = raw_rest.partition("/")
        commit = self._commit(unquote(raw_revision))
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        expand = query.get("expand", ["false"])[0].lower() in ("1", "true")
        entries = repo.tree(
            commit, unquote(raw_folder).strip("/"), recursive=recursive, expand=expand
        )
        if entries is None:
            raise Reply(
                404, f"{unquote(raw_folder)} does not exist on main", "EntryNotFound", commit
            )
        return send_json(handler, method, entries)

    def _paths_info(self, handler, repo, revision):  # type: ignore[no-untyped-def]
        commit = self._commit(revision)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length).decode()
        if "json" in (handler.headers.get("Content-Type") or ""):
            form = json.loads(body or "{}")
            paths = form.get("paths", [])
            expand = bool(form.get("expand", False))
        else:
            fields = parse_qs(body)
            paths = fields.get("paths", [])
            expand = fields.get("expand", ["False"])[0].lower() in ("1", "true")
        return send_json(handler, "POST", repo.paths_info(commit, paths, expand=expand))

    def _resolve(self, handler, method, repo_id, revision, filename):  # type: ignore[no-untyped-def]
        repo = self._visible_repo(repo_id, handler)
        commit = self._commit(revision)
        if repo.gated and not self._authorized(handler):
            if handler.headers.get("Authorization") is None:
                raise Reply(
                    401,
                    f"Access to model {repo_id} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in.",
                    "GatedRepo",
                )
            raise Reply(
                403,
                f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                f"Visit {self.endpoint}/{repo_id} to ask for access.",
                "GatedRepo",
            )
        stub_file = repo.files.get(filename)
        if stub_file is None:
            raise Reply(404, "Entry not found", "EntryNotFound", commit)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{stub_file.etag}"', "Vary": "Origin, Accept"}
        if stub_file.lfs:
            location = (
                f"{self.cdn_endpoint}/lfs/{repo_id}/{stub_file.sha256}?filename={quote(filename)}"
            )
            headers.update(
                {
                    "Location": location,
                    "X-Linked-Etag": f'"{stub_file.sha256}"',
                    "X-Linked-Size": str(stub_file.size),
                    "Content-Length": "0",
                }
            )
            send_head(handler, 302, headers)
            return 302, 0
        return self._serve_bytes(handler, method, stub_file, headers)

    def _cdn(self, handler, method, segments, query, context):  # type: ignore[no-untyped-def]
        if method not in ("GET", "HEAD") or len(segments) != 4 or segments[0] != "lfs":
            raise Reply(404, "Not Found")
        repo = self.repos.get(f"{segments[1]}/{segments[2]}")
        filename = query.get("filename", [""])[0]
        stub_file = repo.files.get(filename) if repo else None
        if repo is None or stub_file is None or stub_file.sha256 != segments[3]:
            raise Reply(404, "Not Found")
        context["repo"], context["filename"] = repo.repo_id, filename
        name = filename.rsplit("/", 1)[-1]
        headers = {
            "ETag": f'"{stub_file.sha256}"',
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
            "Cache-Control": "public, max-age=604800, immutable",
        }
        return self._serve_bytes(handler, method, stub_file, headers)

    # -- writing answers -------------------------------------------------------------------

    def _serve_bytes(self, handler, method, stub_file, headers):  # type: ignore[no-untyped-def]
        status, start, end, extra = byte_range(handler.headers.get("Range"), stub_file.size)
        headers.update(extra)
        headers.update(
            {
                "Accept-Ranges": "bytes",
                "Content-Length": str(end - start),
                "Content-Type": "application/octet-stream",
            }
        )
        send_head(handler, status, headers)
        if method == "HEAD":
            return status, 0
        cut, flip, after = self._take_faults(stub_file.path)
        return status, write_body(
            handler,
            stub_file,
            start,
            end,
            cut=cut,
            flip=flip,
            after=after,
            rate=lambda: self._throttle_bps,
        )

    def _take_faults(
        self, filename: str
    ) -> tuple[int | None, bool, tuple[int, Callable[[], None]] | None]:
        with self._lock:
            cuts = self._cuts.get(filename)
            cut = cuts.pop(0) if cuts else None
            afters = self._after.get(filename)
            after = afters.pop(0) if afters else None
            flip = filename in self._corrupt
            remaining = self._corrupt.get(filename)
            if remaining is not None:
                if remaining <= 1:
                    del self._corrupt[filename]
                else:
                    self._corrupt[filename] = remaining - 1
        return cut, flip, after
