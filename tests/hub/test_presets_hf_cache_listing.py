"""The models in the Hugging Face cache: every repo's main snapshot, model GGUFs only."""

from __future__ import annotations

import os
from pathlib import Path

from homelab.hub.hf_cache import cached_ggufs

SHA = "a" * 64


def _cache_file(cache: Path, repo: str, commit: str, name: str, blob: str) -> Path:
    folder = cache / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)
    (folder / "blobs").mkdir(exist_ok=True)
    (folder / "blobs" / blob).write_bytes(b"GGUF")
    link = folder / "snapshots" / commit / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(folder / "blobs" / blob, link.parent))
    return link


def test_cached_ggufs_lists_model_files_of_each_main_snapshot(tmp_path: Path) -> None:
    model = _cache_file(tmp_path, "owner/Model-GGUF", "1" * 40, "Model-Q4_K_M.gguf", SHA)
    _cache_file(tmp_path, "owner/Model-GGUF", "1" * 40, "mmproj-F16.gguf", "b" * 64)
    _cache_file(tmp_path, "owner/Model-GGUF", "1" * 40, "README.md", "c" * 40)
    split = _cache_file(
        tmp_path, "other/Big-GGUF", "2" * 40, "Q8_0/Big-00001-of-00002.gguf", "d" * 64
    )
    stale = _cache_file(tmp_path, "gone/Old-GGUF", "3" * 40, "Old-Q4_K_M.gguf", "e" * 64)
    stale.unlink()  # a dangling snapshot: nothing listed for it
    (tmp_path / "models--no--refs").mkdir()
    assert cached_ggufs(tmp_path) == [split, model]  # by repo folder name


def test_an_empty_or_missing_cache_lists_nothing(tmp_path: Path) -> None:
    assert cached_ggufs(tmp_path) == []
    assert cached_ggufs(tmp_path / "absent") == []
