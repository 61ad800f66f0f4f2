"""A stand-in for GitHub's llama.cpp release on 127.0.0.1, and the archives it serves.

:class:`ReleaseStandIn` (run by :func:`serving`, a thread with http.server) answers the
REST API's ``/repos/ggml-org/llama.cpp/releases/tags/{tag}`` with the release JSON (each
asset's ``name``, ``size``, ``digest`` and ``browser_download_url``) and serves the asset
downloads with byte ranges (``206``), and can cut a download midway, ignore ``Range``,
answer 404 or a spent rate limit. The archives are CONSTRUCTED (:func:`make_tar`), shaped
like llama.cpp's release.yml packs them (files under one top folder): a stand-in
``llama-server`` shell script answering ``--version`` like b11312, a fake
``libggml-cuda.so`` (random bytes, so a cut falls mid-file), a relative library symlink,
a ``ggml-rpc-server``, and the cudart archive with the CUDA runtime's three libraries.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import socket
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from homelab.engine.llamacpp.locate import LLAMA_CPP_COMMIT, LLAMA_CPP_VERSION

TAG = LLAMA_CPP_VERSION
VERSION_B11312 = f"version: 11312 ({LLAMA_CPP_COMMIT})\nbuilt with cc for x86_64-linux-gnu"


# --- constructed archives ---------------------------------------------------------------


def _script(answer: str) -> bytes:
    """A stand-in llama-server: ``--version`` prints ``answer``, ``--help`` lists --slots,
    ``--list-devices`` lists a card as a CUDA build on a 3090 would."""
    return (
        '#!/bin/sh\ncase "$1" in\n'
        f"  --version) cat <<'EOF'\n{answer}\nEOF\n  ;;\n"
        '  --help) echo "usage: llama-server [options] --slots" ;;\n'
        "  --list-devices) printf 'Available devices:\\n  CUDA0: NVIDIA GeForce RTX 3090 "
        "(24135 MiB, 23720 MiB free)\\n' ;;\nesac\n"
    ).encode()


@dataclass
class Member:
    """One tar member to construct: a file (``data``), a symlink (``link``) or a folder."""

    name: str
    data: bytes = b""
    mode: int = 0o644
    link: str | None = None
    folder: bool = False
    hard: bool = False  # with ``link``: a hard link (to an archive path), not a symlink


def make_tar(members: list[Member]) -> bytes:
    """A .tar.gz of exactly these members, in this order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.mode = m.mode
            if m.folder:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif m.link is not None:
                info.type = tarfile.LNKTYPE if m.hard else tarfile.SYMTYPE
                info.linkname = m.link
            else:
                info.size = len(m.data)
            tar.addfile(info, io.BytesIO(m.data) if m.data else None)
    return buffer.getvalue()


def engine_members(version: str = VERSION_B11312, *extra: Member) -> list[Member]:
    """The engine archive's members as release.yml packs them (``llama-{tag}/...``)."""
    top = f"llama-{TAG}"
    lib = random.Random(11312).randbytes(300_000)
    return [
        Member(top, folder=True),
        Member(f"{top}/llama-server", _script(version), 0o755),
        Member(f"{top}/ggml-rpc-server", b"#!/bin/sh\n", 0o755),
        Member(f"{top}/libggml-cuda.so", lib),
        Member(f"{top}/libllama.so.0", b"\x7fELF llama"),
        Member(f"{top}/libllama.so", link="libllama.so.0"),
        Member(f"{top}/LICENSE", b"MIT\n"),
        *extra,
    ]


def cudart_archive(label: str = "12.8") -> bytes:
    """The CUDA runtime archive: libcudart, libcublas, libcublasLt of the major version."""
    top = f"cudart-llama-{TAG}-bin-ubuntu-cuda-{label}-x64"
    major = label.split(".")[0]
    libs = ("libcudart", "libcublas", "libcublasLt")
    return make_tar(
        [Member(top, folder=True)]
        + [Member(f"{top}/{lib}.so.{major}", f"{lib} {label}".encode()) for lib in libs]
    )


# --- the stand-in release server --------------------------------------------------------


@dataclass
class Seen:
    """One request the stand-in answered: its path, ``Range`` header and status."""

    path: str
    range: str | None
    status: int


@dataclass
class ReleaseStandIn:
    """GitHub for one release: ``/repos/ggml-org/llama.cpp/releases/tags/{tag}`` and
    ``/download/{name}``. ``digests`` overrides an asset's listed digest (None: no digest);
    ``unlisted`` names are left out of the JSON; ``gone`` names answer 404 when downloaded;
    ``cuts[name]`` downloads of it stop halfway and drop the connection; ``ignore_range``
    names answer a Range request with the whole file (200); ``api_status`` replaces the API
    answer (with rate-limit headers for 403)."""

    files: dict[str, bytes]
    port: int = 0
    digests: dict[str, str | None] = field(default_factory=dict)
    unlisted: set[str] = field(default_factory=set)
    gone: set[str] = field(default_factory=set)
    cuts: dict[str, int] = field(default_factory=dict)
    ignore_range: set[str] = field(default_factory=set)
    api_status: int | None = None
    download_base: str | None = None  # where the listed URLs point; None: this stand-in
    seen: list[Seen] = field(default_factory=list)

    def asset_json(self, name: str) -> dict[str, object]:
        digest = f"sha256:{hashlib.sha256(self.files[name]).hexdigest()}"
        base = self.download_base or f"http://127.0.0.1:{self.port}"
        return {
            "name": name,
            "size": len(self.files[name]),
            "digest": self.digests.get(name, digest),
            "browser_download_url": f"{base}/download/{name}",
        }

    def downloads(self) -> list[Seen]:
        return [s for s in self.seen if s.path.startswith("/download/")]


def _handler(stand_in: ReleaseStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads ``stand_in.seen`` instead."""

        def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            stand_in.seen.append(Seen(self.path, self.headers.get("Range"), status))
            self.send_response(status)
            for key, value in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == f"/repos/ggml-org/llama.cpp/releases/tags/{TAG}":
                self._api()
            elif self.path.startswith("/download/"):
                self._download(self.path.removeprefix("/download/"))
            else:
                self._answer(404, b'{"message": "Not Found"}', {})

        def _api(self) -> None:
            if stand_in.api_status is not None:
                limit = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1900000000"}
                headers = limit if stand_in.api_status == 403 else {}
                self._answer(stand_in.api_status, b'{"message": "API rate limit"}', headers)
                return
            assets = [stand_in.asset_json(n) for n in stand_in.files if n not in stand_in.unlisted]
            body = json.dumps({"tag_name": TAG, "assets": assets}).encode()
            self._answer(200, body, {"Content-Type": "application/json"})

        def _download(self, name: str) -> None:
            if name not in stand_in.files or name in stand_in.gone:
                self._answer(404, b"Not Found", {})
                return
            data = stand_in.files[name]
            asked = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
            if asked and name not in stand_in.ignore_range:
                start = int(asked.group(1))
                ranged = {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
                self._answer(206, data[start:], ranged)
                return
            if stand_in.cuts.get(name, 0) > 0:
                stand_in.cuts[name] -= 1
                self._cut(data)
                return
            self._answer(200, data, {})

        def _cut(self, data: bytes) -> None:
            """Announce the whole file, send half of it, drop the connection."""
            stand_in.seen.append(Seen(self.path, self.headers.get("Range"), 200))
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True

    return Handler


@contextmanager
def serving(stand_in: ReleaseStandIn) -> Iterator[ReleaseStandIn]:
    """Serve ``stand_in`` on a free loopback port (set as its ``port``) until the block ends."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stand_in))
    httpd.daemon_threads = True
    stand_in.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield stand_in
    finally:
        httpd.shutdown()
        httpd.server_close()
