"""One running engine as the state file keeps it, parsed strictly.

A record that is not exactly what homelab writes (not an object, a field missing or of
the wrong type, a host other than loopback) is not a record: :meth:`EngineRecord.from_json`
raises and the state file sets it aside (see :mod:`homelab.engine.supervision.state_file`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from homelab.engine.engine_key import is_engine_key
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.identity import verify
from homelab.engine.supervision.ports import LOOPBACK
from homelab.engine.supervision.process import EngineProcess, alive, create_time_of
from homelab.engine.supervision.restarts import Restart, restarts_from_json

if TYPE_CHECKING:
    from homelab.engine.supervision.ports import PortChoice
    from homelab.engine.supervision.states import EngineSpec

VERSION = 1
LEGACY_ENGINE_NAMES = {"llama-server": "llama.cpp"}
"""Records written before engines had one name said "llama-server"."""


@dataclass(frozen=True, slots=True)
class EngineRecord:
    """One running engine, as the state file keeps it."""

    engine: str
    """The engine kind ("llama.cpp", "vllm"), as presets and plan options name it."""
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
    """Set by a stop or a replace before signalling (a stop, not a crash)."""
    engine_id: str | None = None
    """The marker in the engine's environment (``HOMELAB_ENGINE``); None in older records."""
    port_pinned: bool = False
    """The person chose the port (it is never silently another)."""
    facts: PlanFacts | None = None
    """What the plan gave it (slots, context, cache types); None when started without a plan."""
    gate_url: str | None = None
    """The admission gate in front of it (the public URL); None: served directly (no gate)."""
    gate_budget_tokens: int | None = None
    """The per-request ceiling the gate admits: the most tokens (prompt + output) one
    request may be charged (what an agent may plan its context with)."""
    gate_max_tokens: int | None = None
    """The gate's ``max_tokens_cap``: the most tokens it lets one answer generate (what an
    agent is told as its output bound); None: no gate, or a record from before it was kept."""
    gate_pid: int | None = None
    """The process that runs the gate (this supervisor's, or a detached gate's own)."""
    gate_create_time: float | None = None
    """The gate process's start time per the kernel (guards against pid reuse)."""
    api_key: str | None = field(default=None, repr=False)
    """The engine's own key (:mod:`homelab.engine.engine_key`), which every call to its URL
    must send; None: it has none (no gate, or started before engines had keys). Kept here so
    a restart, a detached gate and a later adopter use the same key: the state file is
    written 0600. Out of ``repr``: never logged."""
    kept: bool = False
    """``supervisor_pid`` is homelab's keeper of a detached serve (:mod:`homelab.serve.keeper`),
    not a serve in a terminal; with the keeper gone (SIGKILLed) it stays set, so ``status``
    says the keeper is gone and the next ``serve`` of the model starts a new one."""
    restarts: tuple[Restart, ...] = ()
    """The keeper's latest restarts of the engine and the gate (oldest first)."""

    def keeper_alive(self) -> bool:
        """True while homelab's keeper of this engine runs (verifiably that process)."""
        return self.kept and self.supervisor_alive()

    @property
    def public_url(self) -> str:
        """Where clients go: the gate's URL when it has one, else the engine's."""
        return self.gate_url or self.url

    @property
    def public_port(self) -> int:
        """The port clients use (the gate's, or the engine's without a gate)."""
        if self.gate_url is None:
            return self.port
        return int(self.gate_url.rsplit(":", 1)[1].split("/", 1)[0])

    def gate_alive(self) -> bool:
        """True while the recorded gate process runs (verifiably that process)."""
        return (
            self.gate_url is not None
            and self.gate_pid is not None
            and self.gate_create_time is not None
            and alive(self.gate_pid, self.gate_create_time)
        )

    @property
    def url(self) -> str:
        """The engine's base URL (always loopback: the only address homelab binds)."""
        return f"http://{LOOPBACK}:{self.port}"

    def not_the_engine(self) -> str | None:
        """Why the recorded pid is not (any more) this engine; None while it is."""
        return verify(
            self.pid, pgid=self.pgid, create_time=self.create_time, engine_id=self.engine_id
        )

    def engine_alive(self) -> bool:
        """True while the engine process runs (and is verifiably that engine)."""
        return self.not_the_engine() is None

    def supervisor_alive(self) -> bool:
        """True while a homelab process supervises it (ours included)."""
        return (
            self.supervisor_pid is not None
            and self.supervisor_create_time is not None
            and alive(self.supervisor_pid, self.supervisor_create_time)
        )

    def supervised_by_other(self) -> bool:
        """True when another live homelab process supervises it."""
        return self.supervisor_pid not in (None, os.getpid()) and self.supervisor_alive()

    def to_json(self) -> dict[str, object]:
        """The record as JSON-ready values."""
        data: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["argv"] = list(self.argv)
        data["facts"] = None if self.facts is None else self.facts.to_json()
        data["restarts"] = [r.to_json() for r in self.restarts]
        return {"version": VERSION, **data}

    @classmethod
    def from_json(cls, data: object) -> EngineRecord:
        """Parse a record.

        Raises:
            ValueError: not an object, an unknown version, or a value out of range.
            TypeError: a field is missing or of the wrong type.
        """
        if not isinstance(data, dict):
            what = {type(None): "null", list: "a list", str: "a string", bool: "a boolean"}.get(
                type(data), "a number"
            )
            raise ValueError(f"it holds {what}, not a record (a JSON object)")
        if data.get("version") != VERSION:
            raise ValueError(f"unknown state file version {data.get('version')!r}")
        values: dict[str, object] = {}
        for name, (kinds, required) in _FIELDS.items():
            if name not in data:
                if required:
                    raise TypeError(f"the record has no {name}")
                continue
            value = data[name]
            if not _is(value, kinds):
                said = "of another type" if name == "api_key" else repr(value)  # a secret
                raise TypeError(f"{name} is {said}, not {' or '.join(_names(kinds))}")
            values[name] = value
        argv = values["argv"]
        assert isinstance(argv, list)
        if not all(isinstance(a, str) for a in argv):
            raise TypeError("argv must be a list of strings")
        values["argv"] = tuple(argv)
        if "restarts" in values:
            values["restarts"] = restarts_from_json(values["restarts"])
        if values.get("facts") is not None:
            values["facts"] = PlanFacts.from_json(values["facts"])
        engine = str(values["engine"])
        values["engine"] = LEGACY_ENGINE_NAMES.get(engine, engine)
        record = cls(**values)  # type: ignore[arg-type]
        if record.pid < 1 or record.pgid < 1:
            raise ValueError(f"pid {record.pid} / pgid {record.pgid} is not a process")
        if not 1 <= record.port <= 65535:
            raise ValueError(f"port {record.port} is out of range")
        _check_gate(record)
        if record.host != LOOPBACK:
            raise ValueError(f"host {record.host!r} is not the loopback address homelab binds")
        return record


_NUMBER = (int, float)
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "engine": ((str,), True),
    "pid": ((int,), True),
    "pgid": ((int,), True),
    "create_time": ((*_NUMBER, type(None)), True),
    "argv": ((list,), True),
    "host": ((str,), True),
    "port": ((int,), True),
    "model": ((str,), True),
    "log_path": ((str,), True),
    "started_at": (_NUMBER, True),
    "detached": ((bool,), True),
    "supervisor_pid": ((int, type(None)), False),
    "supervisor_create_time": ((*_NUMBER, type(None)), False),
    "ready_at": ((*_NUMBER, type(None)), False),
    "stop_requested": ((bool,), False),
    "engine_id": ((str, type(None)), False),
    "port_pinned": ((bool,), False),
    "facts": ((dict, type(None)), False),
    "gate_url": ((str, type(None)), False),
    "gate_budget_tokens": ((int, type(None)), False),
    "gate_max_tokens": ((int, type(None)), False),
    "gate_pid": ((int, type(None)), False),
    "gate_create_time": ((*_NUMBER, type(None)), False),
    "api_key": ((str, type(None)), False),
    "kept": ((bool,), False),
    "restarts": ((list,), False),
}


def _check_gate(record: EngineRecord) -> None:
    """A gate URL is ``http://HOST:PORT``; its budget and pid are positive."""
    url = record.gate_url
    if url is not None:
        rest = url.removeprefix("http://")
        host, _, port = rest.rpartition(":")
        if rest == url or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"gate_url {url!r} is not http://HOST:PORT")
    if record.gate_budget_tokens is not None and record.gate_budget_tokens < 1:
        raise ValueError(f"gate_budget_tokens {record.gate_budget_tokens} is not a budget")
    if record.gate_max_tokens is not None and record.gate_max_tokens < 1:
        raise ValueError(f"gate_max_tokens {record.gate_max_tokens} is not a token cap")
    if record.gate_pid is not None and record.gate_pid < 1:
        raise ValueError(f"gate_pid {record.gate_pid} is not a process")
    if record.api_key is not None and not is_engine_key(record.api_key):
        raise ValueError("api_key is not a key homelab makes")  # the value is never said


def _is(value: object, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # JSON true is not a number
        return bool in kinds
    return isinstance(value, kinds)


def _names(kinds: tuple[type, ...]) -> list[str]:
    return ["null" if k is type(None) else k.__name__ for k in kinds]


def own_supervisor() -> tuple[int, float | None]:
    """This process as a record's supervisor: (pid, start time)."""
    pid = os.getpid()
    return pid, create_time_of(pid)


def new_record(
    engine: str,
    proc: EngineProcess,
    argv: list[str],
    port: PortChoice,
    spec: EngineSpec,
    log: Path,
    engine_id: str,
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
        engine_id=engine_id,
        port_pinned=spec.port_pinned,
        facts=spec.facts,
        api_key=spec.api_key,
    )
