"""What engine homelab runs, on disk, so the next homelab finds it instead of starting a second.

One JSON file, ``state_dir()/engine.json``, written atomically (temp file +
rename) by the supervisor at every spawn, when the engine becomes ready, and
when homelab lets go of a detached engine; removed when the engine stops.

A record is *live* while its engine runs, or while the homelab supervising it
runs (it may be between a crash and the restart). When both are gone the record
is stale and reading it removes it. Pids are checked together with the process
start time, so a recycled pid is not mistaken for the engine.

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
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine.supervision.process import EngineProcess, alive, create_time_of
from homelab.errors import EngineError
from homelab.paths import state_dir

if TYPE_CHECKING:
    from homelab.engine.supervision.ports import PortChoice
    from homelab.engine.supervision.states import EngineSpec

logger = logging.getLogger(__name__)

RECORD_NAME = "engine.json"
LOCK_NAME = "engine.lock"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """One running engine, as the state file keeps it."""

    engine: str
    """Which engine ("llama-server", "vllm")."""
    pid: int
    pgid: int
    create_time: float | None
    """The engine's start time per the kernel (guards against pid reuse)."""
    argv: tuple[str, ...]
    host: str
    port: int
    model: str
    log_path: str
    started_at: float
    """Wall-clock time of the spawn (seconds since the epoch)."""
    detached: bool
    supervisor_pid: int | None = None
    """The homelab process supervising it right now; None when nobody does (detached)."""
    supervisor_create_time: float | None = None
    ready_at: float | None = None
    """When it was first seen ready; None while it starts."""
    stop_requested: bool = False
    """Set by `homelab stop` / `--replace` before signalling (a stop, not a crash)."""

    @property
    def url(self) -> str:
        """The engine's base URL."""
        return f"http://{self.host}:{self.port}"

    def engine_alive(self) -> bool:
        """True while the engine process runs."""
        return alive(self.pid, self.create_time)

    def supervisor_alive(self) -> bool:
        """True while a homelab process supervises it (ours included)."""
        return self.supervisor_pid is not None and alive(
            self.supervisor_pid, self.supervisor_create_time
        )

    def supervised_by_other(self) -> bool:
        """True when another live homelab process supervises it."""
        return self.supervisor_pid not in (None, os.getpid()) and self.supervisor_alive()

    def to_json(self) -> dict[str, object]:
        """The record as JSON-ready values."""
        data = asdict(self)
        data["argv"] = list(self.argv)
        return {"version": _VERSION, **data}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> EngineRecord:
        """Parse a record; ValueError/TypeError/KeyError when it is not one."""
        if data.get("version") != _VERSION:
            raise ValueError(f"unknown state file version {data.get('version')!r}")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["argv"] = tuple(str(a) for a in values["argv"])  # type: ignore[union-attr]
        record = cls(**values)  # type: ignore[arg-type]
        if not isinstance(record.pid, int) or not isinstance(record.port, int):
            raise TypeError("pid and port must be integers")
        return record


def own_supervisor() -> tuple[int, float | None]:
    """This process as a record's supervisor: (pid, start time)."""
    pid = os.getpid()
    return pid, create_time_of(pid)


def new_record(
    engine: str, proc: EngineProcess, argv: list[str], port: PortChoice, spec: EngineSpec, log: Path
) -> EngineRecord:
    """The record of an engine just spawned (on ``port``, as ``spec`` says), supervised by us."""
    supervisor_pid, supervisor_create_time = own_supervisor()
    return EngineRecord(
        engine=engine,
        pid=proc.pid,
        pgid=proc.pgid,
        create_time=proc.create_time,
        argv=tuple(argv),
        host=port.host,
        port=port.port,
        model=spec.model,
        log_path=str(log),
        started_at=time.time(),
        detached=spec.detached,
        supervisor_pid=supervisor_pid,
        supervisor_create_time=supervisor_create_time,
    )


class StateFile:
    """Reads and writes the engine record (``state_dir()/engine.json`` unless ``path`` is given)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        """The record file."""
        return self._path if self._path is not None else state_dir() / RECORD_NAME

    def read(self) -> EngineRecord | None:
        """The record as written, live or not; None when there is none or it is unreadable."""
        try:
            data = json.loads(self.path.read_text("utf-8"))
            return EngineRecord.from_json(data)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as error:
            logger.warning("ignoring unreadable engine state file %s: %s", self.path, error)
            return None

    def live(self) -> EngineRecord | None:
        """The record when its engine or its supervisor still runs; a stale one is removed."""
        record = self.read()
        if record is None:
            if self.path.exists():  # unreadable: nothing can use it
                self._unlink()
            return None
        if record.engine_alive() or record.supervisor_alive():
            return record
        self.clear(record.pid)
        return None

    def write(self, record: EngineRecord) -> None:
        """Replace the record atomically."""
        path = self.path
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temp.write_text(json.dumps(record.to_json(), indent=2) + "\n", "utf-8")
        os.replace(temp, path)

    def update(self, pid: int, **changes: object) -> EngineRecord | None:
        """Change fields of the record if it still names engine ``pid``; the new record or None."""
        record = self.read()
        if record is None or record.pid != pid:
            return None
        record = replace(record, **changes)  # type: ignore[arg-type]
        self.write(record)
        return record

    def clear(self, pid: int | None = None) -> None:
        """Remove the record (only if it names engine ``pid``, when given)."""
        if pid is not None:
            record = self.read()
            if record is not None and record.pid != pid:
                return
        self._unlink()

    def _unlink(self) -> None:
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
        with open(lock_path, "a+") as handle:
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

    def spawned(self, record: EngineRecord) -> None:
        """A new engine runs: record it."""
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
