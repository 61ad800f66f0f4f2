"""The commands of an engine build, run one at a time: their output teed to the build log,
their progress lines read, and a failure turned into words a person can act on.

A step is one external command (``cmake`` configure, ``cmake --build``). Its output goes
line by line to the build log; ``[ 45%]`` (make) and ``[12/345]`` (ninja) lines become
progress fractions; the last :data:`LOG_TAIL_LINES` lines are kept, so that a failed step
raises :class:`BuildStepFailed` with them, and :func:`diagnose` names the cause (no
compiler, no disk space, an old CMake, an out-of-memory kill...) and the next step.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
from collections.abc import Callable
from typing import TextIO

from homelab.errors import EngineError

ProgressFn = Callable[[float | None, str], None]
"""``progress(fraction or None, line)``: how far the build is, and the line that says so."""

APT_TOOLCHAIN = "sudo apt-get install cmake build-essential"
LOG_TAIL_LINES = 25

_MAKE_PROGRESS = re.compile(r"^\[\s*(\d{1,3})%\]")
_NINJA_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_DIAGNOSES = (  # (pattern in the log, message, hint); first match wins
    (
        "No space left on device",
        "the disk filled up while building llama-server",
        "free some disk space (the build needs about 1 GiB, CUDA more) and run it again",
    ),
    ("No CMAKE_CXX_COMPILER could be found", "no C++ compiler found", APT_TOOLCHAIN),
    ("No CMAKE_C_COMPILER could be found", "no C compiler found", APT_TOOLCHAIN),
    (
        "No CMAKE_CUDA_COMPILER could be found",
        "CUDA compiler (nvcc) not usable",
        "install the CUDA toolkit (Debian: nvidia-cuda-toolkit) or build with --cpu",
    ),
    (
        "CUDA::cublas",
        "the CUDA toolkit has no cuBLAS, which the CUDA engine needs",
        (
            "install cuBLAS (NVIDIA's libcublas-dev-<version> or Debian's nvidia-cuda-toolkit), "
            "or build with --cpu"
        ),
    ),
    (
        "or higher is required",
        "this CMake is too old for llama.cpp (3.18 or newer needed)",
        "install a newer cmake (Debian bookworm's cmake or `pip install cmake`)",
    ),
    (
        "Killed signal terminated program",
        "the compiler was killed (out of memory?)",
        "build with fewer parallel jobs: homelab engine build --jobs 1",
    ),
)


class BuildStepFailed(Exception):
    """A build step exited non-zero: ``args == (step name, log tail)``; :func:`diagnose`
    turns it into an ``EngineError``."""


def parse_progress(line: str) -> float | None:
    """Fraction done from a ``[ 45%]`` (make) or ``[12/345]`` (ninja) build line, else None."""
    match = _MAKE_PROGRESS.match(line)
    if match:
        return min(int(match.group(1)), 100) / 100.0
    match = _NINJA_PROGRESS.match(line)
    if match and int(match.group(2)) > 0:
        return min(int(match.group(1)) / int(match.group(2)), 1.0)
    return None


def run_step(step: str, argv: list[str], log: TextIO, progress: ProgressFn) -> None:
    """Run one build command, tee its output to ``log`` and report ``[NN%]`` lines.

    Raises:
        BuildStepFailed: the command exited non-zero (with the step's name and log tail).
        OSError: the command could not be started, or the log could not be written.
    """
    log.write(f"\n$ {' '.join(argv)}\n")
    log.flush()
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
    env = {**os.environ, "LC_ALL": "C"}
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            tail.append(line.rstrip())
            fraction = parse_progress(line)
            if fraction is not None:
                progress(fraction, line.strip())
    if proc.returncode != 0:
        raise BuildStepFailed(step, "\n".join(tail))


def diagnose(step: str, tail: str) -> EngineError:
    """Turn a failed step and its log tail into an error a person can act on."""
    for needle, message, hint in _DIAGNOSES:
        if needle in tail:
            return EngineError(f"{message} ({step} failed)\n{tail}", hint=hint)
    return EngineError(
        f"{step} failed:\n{tail}",
        hint="see the full build log named above; fix the cause and run it again",
    )
