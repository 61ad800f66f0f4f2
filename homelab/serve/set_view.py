"""What a front-end shows of a running set of models (``homelab serve A B C``): its gate's
URL, each model's state from the gate (loaded, loading, unloaded; in flight, waiting, swaps,
a load failure) and, for the card bar, the bytes each resident model holds on each device
(its plan's, from the set's record).

One read: the record (:func:`~homelab.engine.supervision.set_record.read_set`) and one ask
of the gate's state; the TUI polls it, never acts on the set's engines (they are the set's
serve's own: adopting or stopping one would take a model from under the gate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from homelab.engine.supervision.restarts import Restart
from homelab.engine.supervision.set_record import SetRecord, read_set

RESIDENT_STATES = ("loaded", "loading", "unloading")
"""States in which a model holds (or is taking, or still frees) its memory."""


@dataclass(frozen=True, slots=True)
class SetModelView:
    id: str
    state: str | None
    """The gate's word (``loaded``, ``loading``, ``unloading``, ``unloaded``); None: the gate
    did not answer."""
    in_flight: int | None = None
    waiting: int | None = None
    swaps: int | None = None
    failure: str | None = None
    device_bytes: dict[str, int] = field(default_factory=dict)

    @property
    def resident(self) -> bool:
        return self.state in RESIDENT_STATES

    def line(self) -> str:
        """``smol: loaded · 1 in flight · 2 swaps`` (no request in flight or waiting: not
        said)."""
        if self.state is None:
            return f"{self.id}: ?"
        parts = [f"{self.id}: {self.state}"]
        if self.in_flight:
            parts.append(f"{self.in_flight} in flight")
        if self.waiting:
            parts.append(f"{self.waiting} waiting")
        if self.swaps is not None:
            parts.append(f"{self.swaps} swap{'' if self.swaps == 1 else 's'}")
        line = " · ".join(parts)
        return f"{line} · failed: {self.failure}" if self.failure else line


@dataclass(frozen=True, slots=True)
class SetView:
    url: str
    """The gate's URL as a client on this machine reaches it."""
    pid: int
    models: tuple[SetModelView, ...]
    answering: bool
    """The gate answered its state (False: every model's state is unknown)."""
    kept: bool = False
    """``pid`` is homelab's keeper (``serve A B C --detach``), not a serve in a terminal."""
    restarts: tuple[Restart, ...] = ()
    """The keeper's latest restarts of the set's engines (oldest first)."""

    def resident_bytes(self) -> list[tuple[str, dict[str, int]]]:
        """(id, bytes per device) of each model holding memory now, in the list's order."""
        return [(m.id, m.device_bytes) for m in self.models if m.resident and m.device_bytes]


def set_view(record: SetRecord, state: dict[str, object] | None, url: str) -> SetView:
    """``record`` with the gate's ``state`` (None: it did not answer)."""
    listed = {}
    models = None if state is None else state.get("models")
    for model in models if isinstance(models, list) else ():
        if isinstance(model, dict) and isinstance(model.get("id"), str):
            listed[model["id"]] = model
    views = []
    for member in record.members:
        got = listed.get(member.id, {})
        views.append(
            SetModelView(
                member.id,
                _text(got.get("state")) if state is not None else None,
                _count(got.get("in_flight")),
                _count(got.get("waiting")),
                _count(got.get("swaps")),
                _text(got.get("failure")),
                dict(member.device_bytes),
            )
        )
    return SetView(url, record.pid, tuple(views), state is not None, record.kept, record.restarts)


def served_set() -> SetView | None:
    """The set homelab serves now, as its gate says; None when no set runs."""
    from homelab.agents.engine_target import local_url
    from homelab.errors import UsageError
    from homelab.gate.client import read_gate_state
    from homelab.gate.key_file import stored_key

    record = read_set()
    if record is None:
        return None
    url = local_url(record.gate_url)
    try:
        key = stored_key()
    except UsageError:
        key = None
    return set_view(record, read_gate_state(url, key), url)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
