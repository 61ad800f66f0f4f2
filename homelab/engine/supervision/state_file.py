"""What engine homelab runs, on disk, so the next homelab finds it instead of starting a second.

One JSON file, ``state_dir()/engine.json``, readable by its owner alone (0600: it holds the
engine's own key, see :mod:`homelab.engine.engine_key`), written atomically (temp file +
rename) by the supervisor at every spawn, when the engine becomes ready, and
when homelab lets go of a detached engine; removed when the engine stops.

A record is *live* while its engine runs, or while the homelab supervising it
runs (it may be between a crash and the restart). When both are gone the record
is stale and reading it removes it. Pids are checked together with the process
start time, its group and its marker (:mod:`homelab.engine.supervision.identity`),
so a recycled pid is not mistaken for the engine.

A file that is not a record (not JSON, not an object, a field of the wrong type, a
directory or a FIFO in its place) is never deleted: it is renamed aside with a
timestamp and the caller is told, and the engine it may have described is still
found by the marker in its environment.

``claim()`` is a file lock held while one homelab decides what to do (adopt,
replace or start) and spawns, so two ``homelab serve`` typed at once cannot
both start an engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from homelab.engine.supervision.identity import key_given
from homelab.engine.supervision.record import EngineRecord, own_supervisor
from homelab.errors import EngineError
from homelab.paths import state_dir

logger = logging.getLogger(__name__)

RECORD_NAME = "engine.json"
LOCK_NAME = "engine.lock"
MAX_RECORD_BYTES = 1 << 20
"""A record is a few hundred bytes; anything this big is not one."""


@dataclass(frozen=True, slots=True)
class SetAside:
    """An unreadable state file moved out of the way (never deleted: it may be all
    that is left about an engine that still runs)."""

    original: Path
    moved_to: Path
    reason: str

    def describe(self) -> str:
        return (
            f"the engine state file {self.original} could not be read ({self.reason}); "
            f"set aside as {self.moved_to.name}"
        )


class UnreadableRecord(Exception):
    """The state file exists but holds no record homelab can use (the reason is the text)."""


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"


class StateFile:
    """Reads and writes the engine record (``state_dir()/engine.json`` unless ``path`` is given)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        """The record file."""
        return self._path if self._path is not None else state_dir() / RECORD_NAME

    def read(self) -> EngineRecord | None:
        """The record as written, live or not; None when there is none or it is unreadable
        (an unreadable one is left where it is: see :meth:`live`)."""
        try:
            return self._parse()
        except UnreadableRecord as error:
            logger.warning("unreadable engine state file %s: %s", self.path, error)
            return None

    def _parse(self) -> EngineRecord | None:
        """The record; None when there is no file.

        Raises:
            UnreadableRecord: something else is there (not a regular file, not JSON, not a
                record). Opened without blocking, so a FIFO in its place cannot hang us.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise UnreadableRecord(error.strerror or str(error)) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UnreadableRecord(f"it is {_kind_of(info.st_mode)}, not a file")
            if info.st_size > MAX_RECORD_BYTES:
                raise UnreadableRecord(f"it holds {info.st_size} bytes, not a record")
            raw = os.read(fd, MAX_RECORD_BYTES + 1)
        except OSError as error:
            raise UnreadableRecord(error.strerror or str(error)) from None
        finally:
            os.close(fd)
        try:
            return EngineRecord.from_json(json.loads(raw.decode("utf-8")))
        except UnicodeDecodeError:
            raise UnreadableRecord("it is not UTF-8 text") from None
        except RecursionError:
            raise UnreadableRecord("it nests too deeply") from None
        except (ValueError, TypeError) as error:
            raise UnreadableRecord(str(error)) from None

    def live(self, notes: list[SetAside] | None = None) -> EngineRecord | None:
        """The record when its engine or its supervisor still runs; a stale one is removed.

        An unreadable one is never removed: it is renamed aside (``engine.json.unreadable-
        <time>``), appended to ``notes`` and logged; the engine it described, if any, is still
        found by its marker (:func:`homelab.engine.supervision.identity.find_engines`).

        Raises:
            EngineError: an unreadable state file could not be moved aside either.
        """
        try:
            record = self._parse()
        except UnreadableRecord as error:
            aside = self._set_aside(str(error))
            if aside is not None:
                if notes is None:
                    logger.warning("%s", aside.describe())
                else:  # the caller says so
                    notes.append(aside)
            return None
        if record is None:
            return None
        if record.engine_alive() or record.supervisor_alive():
            return record
        self.clear(record.pid)
        return None

    def _set_aside(self, reason: str) -> SetAside | None:
        path = self.path
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        target = path.with_name(f"{path.name}.unreadable-{stamp}")
        suffix = 1
        while os.path.lexists(target):
            suffix += 1
            target = path.with_name(f"{path.name}.unreadable-{stamp}-{suffix}")
        try:
            os.rename(path, target)
        except FileNotFoundError:  # another homelab moved it a moment ago
            return None
        except OSError as error:
            raise EngineError(
                f"the engine state file {path} cannot be read ({reason}) "
                f"and cannot be moved aside: {error.strerror}",
                hint=f"look at it, then move it away yourself ({path})",
                title="Unreadable state file",
            ) from None
        return SetAside(path, target, reason)

    def write(self, record: EngineRecord) -> None:
        """Replace the record atomically (a reader sees the old record or the new one, whole)."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        data = (json.dumps(record.to_json(), indent=2) + "\n").encode("utf-8")
        try:  # 0600 from the start (the record may hold the engine's key), never widened
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, 0o600)
            with open(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, path)
        except OSError:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise

    def update(self, pid: int, **changes: object) -> EngineRecord | None:
        """Change fields of the record if it still names engine ``pid``; the new record or None."""
        record = self.read()
        if record is None or record.pid != pid:
            return None
        record = replace(record, **changes)  # type: ignore[arg-type]
        self.write(record)
        return record

    def with_key(self, record: EngineRecord, key_env: str | None) -> EngineRecord:
        """``record``, with the engine's own key read back from the engine's environment
        (:func:`~homelab.engine.supervision.identity.key_given`) when the record lost it (an
        edited file), written back (when it can be) for ``status`` and the next adopter."""
        if record.api_key is not None or key_env is None:
            return record
        key = key_given(record.pid, record.engine_id, key_env)
        if key is None:
            return record  # none given (no gate, an older engine), or not ours to read
        with contextlib.suppress(OSError):
            self.update(record.pid, api_key=key)
        return replace(record, api_key=key)

    def clear(self, pid: int) -> None:
        """Remove the record if it names engine ``pid`` (never one that cannot be read)."""
        record = self.read()
        if record is not None and record.pid == pid:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    @contextlib.contextmanager
    def claim(self, timeout_s: float = 30.0) -> Iterator[None]:
        """Hold the start lock (one homelab at a time decides and spawns).

        Raises:
            EngineError: another homelab held the lock for ``timeout_s``.
        """
        lock_path = self.path.with_name(LOCK_NAME)
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = open(lock_path, "a+")  # read-write: a FIFO in its place does not block
        except OSError as error:
            raise EngineError(
                f"cannot open the start lock {lock_path}: {error.strerror}",
                hint=f"move {lock_path} away; homelab makes a new one",
            ) from None
        with handle:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise EngineError(
                            f"another homelab has been starting an engine for {timeout_s:.0f} s "
                            f"(lock {lock_path})",
                            hint="wait for it to finish, or check `homelab status`",
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


_FAILED = object()


class EngineRecords:
    """The supervisor's side of the state file; without a file every call does nothing.

    A stop from outside is only read from the file when the file did record this
    engine (a failed write must not turn every crash into "stopped from outside").
    """

    def __init__(self, store: StateFile | None) -> None:
        self.store = store
        self._recorded: int | None = None
        self._carried: dict[str, object] = {}

    def carry(self, pid: int | None, **fields: object) -> None:
        """Put ``fields`` in engine ``pid``'s record now and in every record a restart writes
        (a keeper's name and its restarts: a respawn must not drop them)."""
        self._carried.update(fields)
        if pid is not None:
            self._write(self.store.update if self.store else None, pid, **fields)

    @property
    def path(self) -> Path | None:
        """The record file (what the engines' marker names), None without a state file."""
        return None if self.store is None else self.store.path

    def spawned(self, record: EngineRecord) -> None:
        """A new engine runs: record it."""
        if self._carried:
            record = replace(record, **self._carried)  # type: ignore[arg-type]
        if self._write(self.store.write if self.store else None, record) is not _FAILED:
            self._recorded = record.pid if self.store is not None else None

    def ready(self, pid: int) -> None:
        """Engine ``pid`` was seen ready."""
        self._write(self.store.update if self.store else None, pid, ready_at=time.time())

    def claimed(self, pid: int) -> None:
        """This process supervises engine ``pid`` now (it adopted it)."""
        supervisor_pid, create_time = own_supervisor()
        update = self.store.update if self.store else None
        done = self._write(
            update, pid, supervisor_pid=supervisor_pid, supervisor_create_time=create_time
        )
        if done is not None and done is not _FAILED:
            self._recorded = pid

    def released(self, pid: int) -> None:
        """Nobody supervises engine ``pid`` any more (left running, detached)."""
        update = self.store.update if self.store else None
        self._write(update, pid, supervisor_pid=None, supervisor_create_time=None)

    def cleared(self, pid: int | None) -> None:
        """Engine ``pid`` stopped for good: remove its record (not another engine's)."""
        if pid is not None:
            self._write(self.store.clear if self.store else None, pid)

    @staticmethod
    def _write(action: Callable[..., object] | None, *args: object, **kwargs: object) -> object:
        """Run a state-file write; a failure (disk full, no permission) is logged, not raised:
        the engine runs whether or not the file could say so."""
        if action is None:
            return None
        try:
            return action(*args, **kwargs)
        except OSError as error:
            logger.warning("could not update the engine state file: %s", error)
            return _FAILED

    def stop_asked(self, pid: int) -> bool:
        """True when someone else asked engine ``pid`` to stop (`homelab stop`, `--replace`):
        its record is marked, gone, or names another engine."""
        if self.store is None or self._recorded != pid:
            return False
        record = self.store.read()
        return record is None or record.pid != pid or record.stop_requested
