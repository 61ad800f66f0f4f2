"""Which devices a llama-server binary can see (``llama-server --list-devices``).

A plan names its card (``--device CUDA1``) so llama-server does not spread onto the
others; a build without CUDA sees no such device and refuses the flag, so the serve path
asks the binary once and pins only what it can see. The listing is llama.cpp's own
(``common/arg.cpp`` ``common_print_available_devices``): one ``  NAME: DESCRIPTION (T MiB,
F MiB free)`` line per device, ``  (none)`` when there are none.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

_LINE = re.compile(r"^\s+((\S+): .*?)\s*\(\d+ MiB, \d+ MiB free\)\s*$")


def parse_device_lines(text: str) -> tuple[str, ...]:
    """``NAME: DESCRIPTION`` of each device in ``--list-devices`` output, in its order."""
    return tuple(m.group(1) for line in text.splitlines() if (m := _LINE.match(line)))


def parse_device_list(text: str) -> frozenset[str]:
    """Device names in ``--list-devices`` output."""
    return frozenset(line.split(":", 1)[0] for line in parse_device_lines(text))


def visible_devices(executable: str, timeout: float = 30.0) -> frozenset[str] | None:
    """The names the binary lists; None when it could not be asked (then nothing is dropped)."""
    listed = listed_devices(executable, timeout)
    return None if listed is None else frozenset(line.split(":", 1)[0] for line in listed)


def listed_devices(executable: str, timeout: float = 30.0) -> tuple[str, ...] | None:
    """``NAME: DESCRIPTION`` of each device the binary lists; None when it could not be
    asked. Asked once per binary file (its modification time keys the answer)."""
    path = Path(executable)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return None
    return _listed(str(path), stamp, timeout)


@lru_cache(maxsize=8)
def _listed(executable: str, _stamp: int, timeout: float) -> tuple[str, ...] | None:
    try:
        done = subprocess.run(
            [executable, "--list-devices"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0 or "Available devices" not in done.stdout + done.stderr:
        return None
    return parse_device_lines(done.stdout + done.stderr)
