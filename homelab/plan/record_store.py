"""A small JSON file of records: read (a broken file set aside), replaced atomically, locked.

The calibration store (:mod:`homelab.plan.calibration`) and the store of launches that ran
out of memory (:mod:`homelab.plan.calibration_miss`) are both such files: ``{"schema": N,
FIELD: [record, ...]}``, rewritten whole under a lock between homelab processes, so a
crash mid-write never leaves half a file and two writers never lose each other's record.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

try:  # POSIX: serialise read-modify-write between homelab processes
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the lock of the store at ``path`` (a ``.NAME.lock`` file beside it)."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    with open(path.with_name(f".{path.name}.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def move_aside(path: Path, reason: str) -> None:
    """A store that cannot be read is renamed ``NAME.corrupt-<time>`` (kept for a person to
    look at) so homelab starts afresh instead of failing every plan on it."""
    import logging  # only for a broken store (start-up time)

    log = logging.getLogger(__name__)
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
    try:
        os.replace(path, aside)
    except OSError as error:
        log.warning(
            "homelab: %s is unreadable (%s) and could not be moved aside: %s", path, reason, error
        )
        return
    log.warning(
        "homelab: %s was unreadable (%s); moved it to %s and started afresh",
        path,
        reason,
        aside.name,
    )


def read_records(
    path: Path, *, schema: int, field: str, what: str, parse: Callable[[Any], T]
) -> list[T]:
    """Every record in the store (``parse`` of each item of ``field``); [] when there is no
    file; a file that is unreadable, of another schema or with a bad record is set aside."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        move_aside(path, str(error))
        return []
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("schema") != schema:
            raise ValueError(f"not a schema-{schema} {what}")
        return [parse(item) for item in data[field]]
    except (ValueError, KeyError, TypeError) as error:
        move_aside(path, f"{type(error).__name__}: {error}")
        return []


def write_records(path: Path, records: list[Any], *, schema: int, field: str, keep: int) -> None:
    """Replace the store atomically with the last ``keep`` of ``records`` (dataclasses, as
    JSON): a temporary file in the same folder, fsync, rename."""
    import tempfile  # only to write: a plan that finds no record never needs it (start-up)

    data = {"schema": schema, field: [asdict(r) for r in records[-keep:]]}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
