"""Fixtures for the vLLM tests: real models' config.json in a folder with sparse weight shards.

vLLM cannot run here (no GPU), and homelab prices weights by file size only, so a
model folder is the real config.json next to sparse ``*.safetensors`` files whose
sizes add up to the model's real total (``weights.json`` in the fixture folder).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm_fixture_data import CONFIGS, GPU, write_shards

from homelab.gpu.probe import probe
from homelab.gpu.report import GpuReport


@pytest.fixture
def model_dir(tmp_path: Path) -> Callable[..., Path]:
    """``model_dir(name, config=None)``: a folder with the fixture's (or the given) config and shards."""

    made = [0]

    def make(name: str, config: dict[str, Any] | None = None) -> Path:
        made[0] += 1
        folder = tmp_path / "models" / str(made[0]) / name
        folder.mkdir(parents=True)
        if config is None:
            shutil.copy(CONFIGS / name / "config.json", folder / "config.json")
        else:
            (folder / "config.json").write_text(json.dumps(config))
        spec = json.loads((CONFIGS / name / "weights.json").read_text())
        write_shards(folder, int(spec["total_bytes"]), int(spec["shards"]))
        return folder

    return make


@pytest.fixture
def wayland_3090() -> GpuReport:
    """The RTX 3090 driving a KDE Wayland desktop (plus a PyTorch job), replayed."""
    return probe(snapshot=GPU / "rtx3090_wayland.json")
