"""HttpRangeSource over real HTTP on 127.0.0.1: the Hub stand-in (LFS redirect to a CDN on
another port), Python's own http.server (which ignores Range) and a stingy range server.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import pytest
from remote_fixtures import recorded

from homelab.gguf.model_file import read_model
from homelab.gguf.reader import read_header
from homelab.hub.errors import HubAuthError, HubError, HubNetworkError, HubNotFoundError
from homelab.hub.remote_source import HttpRangeSource, RangeNotSupportedError
from tests.factory import write_gguf
from tests.hubstub import HubStub

REPO = "tester/Tiny-GGUF"
FILE = "Tiny-Q8_0.gguf"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf("llama", tmp_path_factory.mktemp("gguf") / FILE, n_layer=4)


@pytest.fixture
def hub(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStub]:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tiny_gguf.parent / "hf-home-unused"))
    with HubStub(
        {REPO: {FILE: tiny_gguf}, "tester/Gated-GGUF": {FILE: tiny_gguf}},
        gated={"tester/Gated-GGUF"},
    ) as stub:
        monkeypatch.setenv("HF_ENDPOINT", stub.endpoint)
        yield stub


def test_head_follows_the_lfs_redirect_and_reads_the_size(hub: HubStub, tiny_gguf: Path) -> None:
    with HttpRangeSource(hub.resolve_url(REPO, FILE)) as source:
        assert source.size() == tiny_gguf.stat().st_size
        assert source.read(0, 4) == b"GGUF"  # straight to the address the HEAD ended at
    heads = [(r.host, r.status) for r in recorded(hub, lambda r: r.method == "HEAD")]
    assert heads == [("hub", 302), ("cdn", 200)]
    gets = [(r.host, r.status) for r in recorded(hub, lambda r: r.method == "GET")]
    assert gets == [("cdn", 206)]


def test_remote_header_equals_the_local_one_and_reads_go_to_the_cdn(
    hub: HubStub, tiny_gguf: Path
) -> None:
    local = read_model(tiny_gguf).header
    with HttpRangeSource(hub.resolve_url(REPO, FILE)) as source:
        remote = read_header(source)
    assert remote.metadata == local.metadata
    assert remote.tensors == local.tensors
    assert remote.header_bytes == local.header_bytes and remote.file_size == local.file_size
    n_reads = remote.extra["read_stats"].reads
    gets = recorded(hub, lambda r: r.method == "GET" and r.filename == FILE)
    assert len(gets) == n_reads and all(r.host == "cdn" and r.status == 206 for r in gets)
    assert sum(r.bytes_sent for r in gets) == remote.extra["read_stats"].bytes_read


def test_reads_are_exact_and_short_only_at_the_end(hub: HubStub, tiny_gguf: Path) -> None:
    data = tiny_gguf.read_bytes()
    size = len(data)
    with HttpRangeSource(hub.resolve_url(REPO, FILE)) as source:  # size unknown: no HEAD first
        assert source.read(size + 5, 10) == b""  # the server's 416: past the end
        assert source.size() == size  # learnt from the 416's Content-Range
    with HttpRangeSource(hub.resolve_url(REPO, FILE)) as source:
        assert source.read(1000, 5000) == data[1000:6000]
        assert source.read(size - 10, 100) == data[-10:]
        assert source.read(7, 0) == b""
    gets = recorded(hub, lambda r: r.method == "GET" and r.host == "cdn")
    assert [r.status for r in gets] == [416, 206, 206]
    assert not [r for r in hub.requests if r.method == "HEAD"]


def test_a_dropped_connection_resumes_where_it_stopped(hub: HubStub, tiny_gguf: Path) -> None:
    hub.cut_after(FILE, 1000)
    with HttpRangeSource(hub.resolve_url(REPO, FILE)) as source:
        assert source.read(0, 65536) == tiny_gguf.read_bytes()[:65536]
    ranges = [r.range for r in recorded(hub, lambda r: r.method == "GET" and r.host == "cdn")]
    assert ranges == ["bytes=0-65535", "bytes=1000-65535"]


def test_gated_repo_without_token_is_a_clear_auth_error(hub: HubStub) -> None:
    with HttpRangeSource(
        hub.resolve_url("tester/Gated-GGUF", FILE), repo_id="tester/Gated-GGUF"
    ) as source:
        with pytest.raises(HubAuthError) as caught:
            source.read(0, 100)
    assert "401" in caught.value.message and "gated" in caught.value.message
    assert "HF_TOKEN" in (caught.value.hint or "") and "tester/Gated-GGUF" in (
        caught.value.hint or ""
    )


def test_gated_repo_with_the_wrong_token_is_403(
    hub: HubStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.require_token("hf_right")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with HttpRangeSource(hub.resolve_url("tester/Gated-GGUF", FILE)) as source:
        with pytest.raises(HubAuthError, match="403"):
            source.size()


def test_the_token_is_sent_to_the_hub_only_never_to_the_cdn(
    hub: HubStub, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.require_token("hf_right")
    monkeypatch.setenv("HF_TOKEN", "hf_right")
    with HttpRangeSource(hub.resolve_url("tester/Gated-GGUF", FILE)) as source:
        assert source.read(0, 4) == b"GGUF"
        assert source.read(10, 10) == tiny_gguf.read_bytes()[10:20]
    cdn_side = recorded(hub, lambda r: r.host == "cdn")
    hub_side = [r for r in hub.requests if r.host == "hub"]
    assert hub_side and all(r.authorization == "Bearer hf_right" for r in hub_side)
    assert len(cdn_side) == 2 and all(r.authorization is None for r in cdn_side)


@pytest.mark.parametrize(("repo", "filename"), [(REPO, "Nope-Q4_K_M.gguf"), ("tester/Nope", FILE)])
def test_missing_file_or_repo_is_not_found(hub: HubStub, repo: str, filename: str) -> None:
    with HttpRangeSource(hub.resolve_url(repo, filename)) as source:
        with pytest.raises(HubNotFoundError) as caught:
            source.size()
    assert "404" in caught.value.message and "homelab quants" in (caught.value.hint or "")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_nothing_listening_is_a_network_error() -> None:
    url = f"http://127.0.0.1:{_closed_port()}/x/y/resolve/main/f.gguf"
    with HttpRangeSource(url) as source, pytest.raises(HubNetworkError) as caught:
        source.read(0, 10)
    assert "cannot reach 127.0.0.1" in caught.value.message
    assert "HF_HUB_OFFLINE" in (caught.value.hint or "")


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 in a thread; ``url(path)``; stopped on exit."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{path}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def _quiet_files(folder: Path) -> type[SimpleHTTPRequestHandler]:
    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, directory=str(folder), **kwargs)

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


def test_a_server_that_ignores_range_is_refused_without_downloading(tmp_path: Path) -> None:
    big = tmp_path / "big.gguf"
    big.write_bytes(b"GGUF" + bytes(4 << 20))
    with _Server(_quiet_files(tmp_path)) as server:
        with HttpRangeSource(server.url("big.gguf")) as source:
            with pytest.raises(RangeNotSupportedError) as caught:
                source.read(0, 65536)
            assert source.bytes_received == 0
    assert "ignored the byte-range request" in caught.value.message
    assert f"{4 * 1024 * 1024 + 4:,} bytes" in caught.value.message


def test_a_small_file_sent_whole_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "small.bin").write_bytes(b"0123456789")
    with _Server(_quiet_files(tmp_path)) as server:
        with HttpRangeSource(server.url("small.bin")) as source:
            assert source.read(0, 65536) == b"0123456789"
            assert source.size() == 10


class _Stingy(BaseHTTPRequestHandler):
    """Answers 503 to the first request, then at most 1000 bytes per range (RFC 9110 allows it)."""

    protocol_version = "HTTP/1.1"
    data = bytes(range(256)) * 40  # 10,240 bytes
    answered = 0

    def do_GET(self) -> None:
        cls = type(self)
        cls.answered += 1
        if cls.answered == 1:
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        first, last = self.headers["Range"].removeprefix("bytes=").split("-")
        start = int(first)
        end = min(int(last), start + 999, len(self.data) - 1)
        body = self.data[start : end + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(self.data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def test_partial_answers_and_a_503_still_give_every_byte_asked_for() -> None:
    _Stingy.answered = 0
    with _Server(_Stingy) as server, HttpRangeSource(server.url("f")) as source:
        assert source.read(500, 4000) == _Stingy.data[500:4500]
        assert source.read(10_000, 4000) == _Stingy.data[10_000:]  # short: the end
        assert source.size() == len(_Stingy.data)  # learnt from Content-Range, no HEAD
    assert _Stingy.answered == 1 + 4 + 1


def test_errors_are_homelab_errors_with_hints(hub: HubStub) -> None:
    with HttpRangeSource(hub.resolve_url("tester/Nope", FILE)) as source:
        with pytest.raises(HubError) as caught:
            source.read(0, 10)
    assert caught.value.exit_code == 1 and caught.value.hint
