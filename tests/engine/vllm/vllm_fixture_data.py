"""Paths and readers for the vLLM fixtures (real configs, written start-up logs)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CONFIGS = FIXTURES / "vllm" / "configs"
LOGS = FIXTURES / "vllm" / "logs"
GPU = FIXTURES / "gpu"


def raw_config(name: str) -> dict[str, Any]:
    """The fixture's config.json as a dict (tests derive their expectations from it)."""
    return json.loads((CONFIGS / name / "config.json").read_text())


def text_config(name: str) -> dict[str, Any]:
    raw = raw_config(name)
    return raw.get("text_config", raw)


def weights_total(name: str) -> int:
    return int(json.loads((CONFIGS / name / "weights.json").read_text())["total_bytes"])


def write_shards(folder: Path, total: int, shards: int) -> list[int]:
    """Sparse safetensors files of ``total`` bytes in all; returns their sizes."""
    sizes = [total // shards] * shards
    sizes[-1] += total - sum(sizes)
    for i, size in enumerate(sizes):
        with open(folder / f"model-{i + 1:05d}-of-{shards:05d}.safetensors", "wb") as f:
            f.truncate(size)
    return sizes


def fake_hf_cache(root: Path, repo: str, name: str) -> Path:
    """The standard HF hub cache layout: blobs, a snapshot of links, refs/main."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo_dir / "snapshots" / commit
    blobs = repo_dir / "blobs"
    for d in (snapshot, blobs, repo_dir / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs" / "main").write_text(commit)
    (blobs / "cfg").write_bytes((CONFIGS / name / "config.json").read_bytes())
    os.symlink("../../blobs/cfg", snapshot / "config.json")
    sizes = write_shards(blobs, weights_total(name), 2)
    for i, _ in enumerate(sizes):
        shard = f"model-{i + 1:05d}-of-00002.safetensors"
        os.symlink(f"../../blobs/{shard}", snapshot / shard)
    return snapshot
