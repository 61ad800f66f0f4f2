"""The header-bytes cache: exact prefixes, keys, refs for offline use, LRU bound, damage."""

from __future__ import annotations

import os
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from homelab.errors import ModelFileError
from homelab.gguf.reader import read_header
from homelab.gguf.source import LocalFileSource
from homelab.hub.header_cache import (
    CachedHeader,
    HeaderCache,
    HeaderKey,
    read_header_capturing,
)
from homelab.paths import cache_dir
from tests.factory import write_gguf

SHA = "a" * 40


class CountingSource:
    """A local file that counts what is read from it, and where."""

    def __init__(self, path: Path) -> None:
        self.inner = LocalFileSource(path)
        self.name = str(path)
        self.reads: list[tuple[int, int]] = []

    def size(self) -> int | None:
        return self.inner.size()

    def read(self, offset: int, length: int) -> bytes:
        data = self.inner.read(offset, length)
        self.reads.append((offset, len(data)))
        return data


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf("qwen3", tmp_path_factory.mktemp("gguf") / "Model-Q8_0.gguf", n_layer=6)


def test_capture_returns_the_exact_header_prefix_and_the_same_header(gguf_path: Path) -> None:
    source = CountingSource(gguf_path)
    header, data = read_header_capturing(source)
    assert data == gguf_path.read_bytes()[: header.header_bytes]
    again = CachedHeader(
        HeaderKey("o/r", SHA, "m.gguf", None), data, header.file_size, "cached"
    ).parse()
    assert again.metadata == header.metadata and again.tensors == header.tensors
    assert again.file_size == gguf_path.stat().st_size and again.data_offset == header.data_offset


def test_capture_fetches_the_holes_the_parser_skipped(tmp_path: Path) -> None:
    """The reader skips a long array it does not need (unfetched when the size is known);
    the cache still gets every header byte, and the extra reads are only those holes."""
    path = tmp_path / "holes.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("test.big_ints", list(range(200_000)))  # 800 KB skipped by the parser
    writer.add_tensor_info("t", (32,), np.dtype(np.float32), 128)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    plain = CountingSource(path)
    header = read_header(plain)
    captured = CountingSource(path)
    _, data = read_header_capturing(captured)
    assert data == path.read_bytes()[: header.header_bytes]
    assert captured.reads[: len(plain.reads)] == plain.reads
    extra = captured.reads[len(plain.reads) :]
    assert extra, "the parser skipped bytes, so the capture must have fetched them"
    fetched = sum(n for _, n in captured.reads)
    assert fetched <= header.header_bytes + 64 * 1024  # the holes, not the file again


def test_put_get_by_exact_key(gguf_path: Path) -> None:
    header, data = read_header_capturing(LocalFileSource(gguf_path))
    cache = HeaderCache()
    key = HeaderKey("o/r", SHA, "Model-Q8_0.gguf", "e1")
    assert cache.get(key) is None
    cache.put(key, data, header.file_size, "http://x/o/r/resolve/a/Model-Q8_0.gguf")
    assert cache.root == cache_dir() / "headers"  # the per-test cache dir from conftest
    entry = cache.get(key)
    assert entry is not None and entry.data == data and entry.file_size == header.file_size
    assert entry.parse().tensors == header.tensors
    assert cache.get(HeaderKey("o/r", SHA, "Model-Q8_0.gguf", "e2")) is None  # another ETag
    assert cache.get(HeaderKey("o/r", "b" * 40, "Model-Q8_0.gguf", "e1")) is None


def test_offline_lookup_through_a_remembered_branch(gguf_path: Path) -> None:
    _, data = read_header_capturing(LocalFileSource(gguf_path))
    cache = HeaderCache()
    cache.put(HeaderKey("o/r", SHA, "sub/A-Q4_K_M.gguf", "e1"), data, 1, "u1")
    cache.put(HeaderKey("o/r", SHA, "B-Q8_0.gguf", "e2"), data, 2, "u2")
    assert cache.find("o/r", "main", "B-Q8_0.gguf") is None  # main never resolved yet
    cache.remember_ref("o/r", "main", SHA)
    assert cache.commit_for("o/r", "main") == SHA
    found = cache.find("o/r", "main", "B-Q8_0.gguf")
    assert found is not None and found.file_size == 2 and found.url == "u2"
    assert _filenames(cache, "o/r", "main") == ["B-Q8_0.gguf", "sub/A-Q4_K_M.gguf"]
    assert _filenames(cache, "o/r", SHA) == _filenames(cache, "o/r", "main")
    assert _filenames(cache, "x/y", "main") == []


def _filenames(cache: HeaderCache, repo_id: str, revision: str) -> list[str]:
    return [entry.filename for entry in cache.stored(repo_id, revision)]


def test_size_is_bounded_least_recently_used_first(tmp_path: Path) -> None:
    cache = HeaderCache(tmp_path / "h", limit_bytes=2500)
    keys = [HeaderKey("o/r", SHA, f"f{i}.gguf", None) for i in range(3)]
    for i, key in enumerate(keys[:2]):
        cache.put(key, bytes([i]) * 1000, 10_000, f"u{i}")
    old = time.time() - 100
    for path in (tmp_path / "h").rglob("*.hdr"):
        os.utime(path, (old, old))
    assert cache.get(keys[0]) is not None  # used now: f1 is the least recently used
    cache.put(keys[2], b"\2" * 1000, 10_000, "u2")
    assert sum(p.stat().st_size for p in (tmp_path / "h").rglob("*.hdr")) <= 2500
    assert cache.get(keys[1]) is None
    assert cache.get(keys[0]) is not None and cache.get(keys[2]) is not None
    cache.put(HeaderKey("o/r", SHA, "huge.gguf", None), b"x" * 3000, 10_000, "u")  # over the limit
    assert cache.get(HeaderKey("o/r", SHA, "huge.gguf", None)) is None
    assert cache.get(keys[0]) is not None


def test_damaged_entries_are_ignored_and_removed(gguf_path: Path) -> None:
    _, data = read_header_capturing(LocalFileSource(gguf_path))
    cache = HeaderCache()
    key = HeaderKey("o/r", SHA, "m.gguf", "e")
    cache.put(key, data, 123, "u")
    [hdr] = list(cache.root.rglob("*.hdr"))
    hdr.write_bytes(data[:-5])  # truncated behind our back
    assert cache.get(key) is None
    assert not hdr.exists()
    cache.put(key, b"GGUF" + bytes(40), 123, "u")  # stored, but not a header
    entry = cache.get(key)
    assert entry is not None
    with pytest.raises(ModelFileError):
        entry.parse()


def test_an_unwritable_cache_loses_only_the_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    cache = HeaderCache(blocker / "headers")
    cache.put(HeaderKey("o/r", SHA, "m.gguf", "e"), b"abc", 1, "u")  # no exception
    cache.remember_ref("o/r", "main", SHA)
    assert cache.get(HeaderKey("o/r", SHA, "m.gguf", "e")) is None
