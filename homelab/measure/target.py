"""Which engine a bench measures, and the gate in front of it.

By default the engine homelab runs (the state file's record): its loopback URL, and the
gate's when one runs (with the gate's key, if one was made). A ``url`` names another
llama-server on this machine; when it is homelab's engine (or its gate) the record is
still used, so the result can be stored under the engine's flags.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.engine.kinds import KINDS
from homelab.engine.loopback import require_loopback
from homelab.engine.supervision.record import EngineRecord
from homelab.errors import EngineError, UsageError


class NoEngineError(EngineError):
    """Nothing (or nothing llama-server-like) answers where the bench was pointed."""

    title = "No engine to measure"


@dataclass(frozen=True, slots=True)
class Target:
    engine_url: str
    gate_url: str | None
    api_key: str | None
    record: EngineRecord | None
    """homelab's record of the engine; None: not an engine homelab runs."""

    @property
    def engine_key(self) -> str | None:
        """The engine's own key (an engine behind homelab's gate answers 401 without it)."""
        return None if self.record is None else self.record.api_key


def find_target(url: str | None = None) -> Target:
    """The engine (and gate) to measure.

    Raises:
        NoEngineError: no ``url`` and homelab runs no engine.
        UsageError: the engine homelab runs is not llama.cpp, or the gate's key file is bad.
        NotLoopbackError: ``url`` is not on this machine.
    """
    from homelab.engine.supervision.state_file import StateFile
    from homelab.gate.key_file import stored_key

    record = StateFile().live()
    if url is None:
        if record is None:
            raise NoEngineError(
                "homelab runs no engine now, so there is nothing to measure",
                hint="Start one (`serve`), or point the bench at a running llama-server (`url`).",
            )
        kind = KINDS.get(record.engine)
        if kind is None or not kind.benched:
            raise UsageError(
                f"the bench measures llama.cpp engines; homelab runs {record.engine} now",
                hint="Serve the model with llama.cpp (`engine`) to measure it.",
            )
        gate = record.gate_url if record.gate_alive() else None
        return Target(record.url, gate, stored_key() if gate else None, record)
    asked = require_loopback(url).rstrip("/")
    if record is not None and asked == record.url:
        return Target(record.url, None, None, record)
    if record is not None and asked == record.gate_url:
        return Target(record.url, asked, stored_key(), record)
    return Target(asked, None, None, None)
