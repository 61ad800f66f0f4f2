"""The record of a running set of models (``homelab serve A B C``):
``$HOMELAB_STATE_DIR/model-set.json``.

Written by the set's serve once its residents are loaded and removed when it stops; read by
``status``/``stop``, the agents' hand-offs (which model is the agent's, which is small, which
completes code) and the TUI (the card bar's share of each model, and not adopting a set's
engine as a single engine). Each member keeps what its plan gave it: its workload, its bytes
per device and its :class:`~homelab.engine.supervision.facts.PlanFacts` (None when it could
not be planned: it is listed but never loads).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.restarts import Restart, restarts_from_json

SET_RECORD = "model-set.json"
MAX_RECORD_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SetMember:
    """One model of the running set."""

    id: str
    aliases: tuple[str, ...] = ()
    workload: str | None = None
    """``agent``, ``chat`` or ``fim``; None in a record from before it was kept."""
    device_bytes: dict[str, int] = field(default_factory=dict)
    """Its plan's bytes per device (``CUDA0``, ``CPU``); empty: not planned or not known."""
    facts: PlanFacts | None = None
    """What its plan gives its engine; None: no plan (or an older record)."""
    model: str | None = None
    """The model its engine loads (the GGUF's path); None: not planned or not known."""

    @property
    def total_bytes(self) -> int | None:
        """Its bytes on every device together; None when not known."""
        return sum(self.device_bytes.values()) if self.device_bytes else None

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "aliases": list(self.aliases),
            "workload": self.workload,
            "device_bytes": dict(self.device_bytes),
            "facts": None if self.facts is None else self.facts.to_json(),
            "model": self.model,
        }

    @classmethod
    def from_json(cls, data: object) -> SetMember | None:
        """A member, or None when ``data`` is not one (a hand-edited or older record)."""
        if isinstance(data, str):  # older records list the ids only
            return cls(data)
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return None
        aliases = data.get("aliases")
        workload, model = data.get("workload"), data.get("model")
        raw_bytes = data.get("device_bytes")
        device_bytes = (
            {str(k): v for k, v in raw_bytes.items() if isinstance(v, int) and v >= 0}
            if isinstance(raw_bytes, dict)
            else {}
        )
        try:
            facts = None if data.get("facts") is None else PlanFacts.from_json(data["facts"])
        except TypeError:
            facts = None
        return cls(
            data["id"],
            tuple(a for a in aliases if isinstance(a, str)) if isinstance(aliases, list) else (),
            workload if isinstance(workload, str) else None,
            device_bytes,
            facts,
            model if isinstance(model, str) else None,
        )


@dataclass(frozen=True, slots=True)
class SetRecord:
    """The running set: its serve's pid, its gate, its members in the list's order."""

    pid: int
    gate_url: str
    members: tuple[SetMember, ...]
    residents: tuple[str, ...] = ()
    """The models loaded at start (the placement's residents)."""
    gate_max_tokens: int | None = None
    """The gate's ``max_tokens_cap``; None: an older record (the default is assumed)."""
    started_at: float = 0.0
    create_time: float | None = None
    """The kernel's start time of ``pid``: a recycled pid is never taken for the set's serve;
    None: an older record (then the pid alone is trusted, as before)."""
    kept: bool = False
    """True when homelab's keeper (``serve --detach``) serves the set: ``pid`` is the keeper."""
    restarts: tuple[Restart, ...] = ()
    """The engines it restarted after a crash (the latest), each ``why`` naming the model."""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(member.id for member in self.members)

    def member(self, ident: str) -> SetMember | None:
        return next((m for m in self.members if m.id == ident), None)

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "gate_url": self.gate_url,
            "models": list(self.ids),
            "members": [member.to_json() for member in self.members],
            "residents": list(self.residents),
            "gate_max_tokens": self.gate_max_tokens,
            "started_at": self.started_at,
            "create_time": self.create_time,
            "kept": self.kept,
            "restarts": [r.to_json() for r in self.restarts],
        }

    @classmethod
    def from_json(cls, data: object) -> SetRecord | None:
        if not isinstance(data, dict):
            return None
        pid, url = data.get("pid"), data.get("gate_url")
        if not isinstance(pid, int) or not isinstance(url, str):
            return None
        raw = data.get("members")
        if not isinstance(raw, list):
            raw = data.get("models")
        members = tuple(m for m in (SetMember.from_json(x) for x in raw or ()) if m is not None)
        residents = data.get("residents")
        cap = data.get("gate_max_tokens")
        started, created = data.get("started_at"), data.get("create_time")
        try:
            restarts = restarts_from_json(data.get("restarts", []))
        except (TypeError, ValueError):
            restarts = ()
        return cls(
            pid,
            url,
            members,
            tuple(r for r in residents if isinstance(r, str))
            if isinstance(residents, list)
            else (),
            cap if isinstance(cap, int) and not isinstance(cap, bool) else None,
            float(started) if isinstance(started, (int, float)) else 0.0,
            float(created)
            if isinstance(created, int | float) and not isinstance(created, bool)
            else None,
            data.get("kept") is True,
            restarts,
        )


def set_record_path() -> Path:
    from homelab.paths import state_dir

    return state_dir() / SET_RECORD


def read_set_json() -> dict[str, object] | None:
    """The record as written, when its serve still runs; None otherwise (no record, a torn
    one, or its pid gone or now another process: the start time recorded tells)."""
    data = _read_raw()
    if data is None or not _serve_alive(data):
        return None
    return data


def stale_set() -> SetRecord | None:
    """A record whose serve is gone (a keeper killed, a serve that could not clean up): what
    ``status`` says once, and what the next serve of a set writes over; None otherwise."""
    data = _read_raw()
    if data is None or _serve_alive(data):
        return None
    return SetRecord.from_json(data)


def _read_raw() -> dict[str, object] | None:
    try:
        with open(set_record_path(), "rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
        if len(raw) > MAX_RECORD_BYTES:
            return None
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _serve_alive(data: dict[str, object]) -> bool:
    """The record's pid runs and is the process that wrote it (its start time, when kept)."""
    from homelab.engine.supervision.process import alive

    pid, created = data.get("pid"), data.get("create_time")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if isinstance(created, bool) or not isinstance(created, int | float):
        created = None
    return alive(pid, None if created is None else float(created))


def read_set() -> SetRecord | None:
    """The running set's record; None when no set runs (or its serve is gone)."""
    data = read_set_json()
    return None if data is None else SetRecord.from_json(data)


def write_set(record: SetRecord) -> None:
    """Write the record atomically (a reader sees it whole or not at all)."""
    path = set_record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(record.to_json()), encoding="utf-8")
    os.replace(temp, path)


def forget_set() -> None:
    """Remove the record when this process wrote it."""
    try:
        data = json.loads(set_record_path().read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("pid") == os.getpid():
            set_record_path().unlink()
    except (OSError, ValueError):
        pass


def refuse_beside_set() -> None:
    """One model's serve while a set runs: refused, as another model's engine is.

    Raises:
        EngineError: a set of models runs (its gate, its pid, its ids named).
    """
    from homelab.errors import EngineError

    record = read_set()
    if record is None:
        return
    by = "kept by homelab's keeper" if record.kept else "served by homelab"
    raise EngineError(
        f"a set of models ({', '.join(record.ids)}) is served at {record.gate_url}/v1, "
        f"{by} (pid {record.pid})",
        hint="use one of its models by name there; `stop` stops the set",
        title="Engine already running",
    )


def forget_stale() -> None:
    """Remove the record when its serve is gone (a keeper killed, or stopped just now)."""
    data = _read_raw()
    if data is not None and not _serve_alive(data):
        with contextlib.suppress(OSError):
            set_record_path().unlink()


def new_record(
    gate_url: str,
    members: tuple[SetMember, ...],
    residents: tuple[str, ...],
    gate_max_tokens: int | None,
    *,
    kept: bool = False,
) -> SetRecord:
    """This process's record of the set it serves (``kept``: this process is its keeper)."""
    from homelab.engine.supervision.process import create_time_of

    pid = os.getpid()
    return SetRecord(
        pid,
        gate_url,
        members,
        residents,
        gate_max_tokens,
        time.time(),
        create_time_of(pid),
        kept,
    )
