"""Putting an engine into homelab's engine folder: one writer at a time, complete or not at all.

Both ways an engine arrives (a build from source, a fetched release) hold a machine-wide
lock while they work (another homelab waits, and says so), and stage the folder beside its
final place, then rename it there: a reader finds the whole engine or none. The wait for
the lock asks the progress callback again every :data:`LOCK_POLL_S`, so a callback that
raises (the TUI's cancel) stops the wait at once instead of after the other build.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from homelab.engine.llamacpp import locate
from homelab.engine.llamacpp.build_steps import ProgressFn

LOCK_POLL_S = 0.2
"""How often a wait for another build's lock tries again (and asks the callback)."""


@contextlib.contextmanager
def engine_lock(name: str, progress: ProgressFn, waiting: str) -> Iterator[None]:
    """Hold ``engine_root()/.NAME.lock``; when another process has it, say ``waiting`` and
    wait, saying it again at each try (what ``progress`` raises ends the wait: nothing held)."""
    root = locate.engine_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                progress(None, waiting)
                time.sleep(LOCK_POLL_S)
        yield


def move_into_place(staging: Path, dest: Path) -> None:
    """Rename ``staging`` to ``dest`` (an older ``dest`` set aside first, then removed)."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
    os.replace(staging, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
