"""What homelab's keeper restarted, and why a keeper ended: kept beside the engine record.

A detached serve is kept by a process of its own (:mod:`homelab.serve.keeper`), which
restarts the engine after a crash and the gate after it dies. The engine record names the
keeper (``supervisor_pid`` with ``kept``) and keeps the last :data:`KEPT` restarts
(:class:`Restart`: what, when, why). When a keeper stops restarting (a crash loop, a
failure that would repeat) the engine's record is gone with the engine, so the keeper
leaves a :class:`KeeperEnd` note (``state_dir()/keeper-end.json``) that ``homelab
status`` shows until the next serve starts.

Both are parsed strictly: anything that is not exactly what homelab writes is no note
(unknown values are null, never 0).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from homelab.paths import state_dir

KEPT = 10
"""Restarts a record keeps (the latest)."""
END_NAME = "keeper-end.json"
MAX_NOTE_BYTES = 64 * 1024

What = Literal["engine", "gate"]


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart a keeper made."""

    what: What
    at: float
    """When it died (seconds since the epoch)."""
    why: str
    """A few words (the failure's title, or "exited")."""
    returncode: int | None = None
    """Its exit code (negative: the signal); None when unknown (an adopted process)."""

    def describe(self) -> str:
        """``engine: killed by SIGKILL`` style words."""
        return f"{self.what}: {self.why}{exit_words(self.returncode)}"

    def to_json(self) -> dict[str, object]:
        return {"what": self.what, "at": self.at, "why": self.why, "returncode": self.returncode}

    @classmethod
    def from_json(cls, data: object) -> Restart:
        """Raises: ValueError / TypeError: not a restart as homelab writes one."""
        if not isinstance(data, dict):
            raise TypeError("a restart is an object")
        what, at, why, code = (data.get(k) for k in ("what", "at", "why", "returncode"))
        if what not in ("engine", "gate"):
            raise ValueError(f"a restart of {what!r}")
        if isinstance(at, bool) or not isinstance(at, int | float) or not isinstance(why, str):
            raise TypeError("a restart's at is a number and its why a text")
        if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
            raise TypeError("a restart's returncode is an integer or null")
        return cls(what, float(at), why, code)


def exit_words(returncode: int | None) -> str:
    """`` (exit 1)``, `` (killed by SIGKILL)``, or nothing when unknown."""
    if returncode is None:
        return ""
    if returncode < 0:
        try:
            return f" (killed by {signal.Signals(-returncode).name})"
        except ValueError:
            return f" (killed by signal {-returncode})"
    return f" (exit {returncode})"


def restarts_from_json(data: object) -> tuple[Restart, ...]:
    """Raises: ValueError / TypeError: not a list of restarts."""
    if not isinstance(data, list):
        raise TypeError("restarts is a list")
    return tuple(Restart.from_json(item) for item in data[-KEPT:])


def with_restart(restarts: tuple[Restart, ...], restart: Restart) -> tuple[Restart, ...]:
    """``restarts`` and one more, the oldest dropped past :data:`KEPT`."""
    return (*restarts, restart)[-KEPT:]


@dataclass(frozen=True, slots=True)
class KeeperEnd:
    """A keeper that ended on its own: the model it kept, when, why, what it restarted."""

    model: str
    at: float
    why: str
    restarts: tuple[Restart, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "model": self.model,
            "at": self.at,
            "why": self.why,
            "restarts": [r.to_json() for r in self.restarts],
        }

    @classmethod
    def from_json(cls, data: object) -> KeeperEnd:
        """Raises: ValueError / TypeError: not a note as homelab writes one."""
        if not isinstance(data, dict):
            raise TypeError("a keeper's note is an object")
        model, at, why = data.get("model"), data.get("at"), data.get("why")
        if not isinstance(model, str) or not isinstance(why, str):
            raise TypeError("a keeper's note names its model and why")
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise TypeError("a keeper's note has its time")
        return cls(model, float(at), why, restarts_from_json(data.get("restarts", [])))


def end_path() -> Path:
    return state_dir() / END_NAME


def write_end(note: KeeperEnd) -> None:
    """Leave the note (atomically: a reader sees it whole or not at all)."""
    path = end_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(note.to_json()) + "\n", encoding="utf-8")
    os.replace(temp, path)


def read_end() -> KeeperEnd | None:
    """The note a keeper left; None when there is none or it is not one (a torn write)."""
    try:
        with open(end_path(), "rb") as handle:
            raw = handle.read(MAX_NOTE_BYTES + 1)
        if len(raw) > MAX_NOTE_BYTES:
            return None
        return KeeperEnd.from_json(json.loads(raw.decode("utf-8")))
    except (OSError, ValueError, TypeError, RecursionError):
        return None


def clear_end() -> None:
    """A new serve starts: the last keeper's note is history."""
    with contextlib.suppress(OSError):
        end_path().unlink()
