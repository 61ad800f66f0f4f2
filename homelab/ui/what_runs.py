"""What runs, set against what is picked: the same engine (nothing to do) or a switch.

The engine flow asks before ``s`` replaces anything; these are its facts and its words. An
engine is "the same" only when it runs the picked row (the same name: the name is what it is
served by) with the picked plan's facts (slots, context, cache). Another name of the same
file (a symlink, a preset that resolved to it) or other settings is a switch like any other.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.engine.supervision.facts import PlanFacts
    from homelab.engine.supervision.record import EngineRecord
    from homelab.ui.state import Picked, Running


def picked_facts(picked: Picked) -> PlanFacts | None:
    """What the picked plan would give the engine (None: not prepared, e.g. not downloaded)."""
    return None if picked.preview is None else picked.preview.prepared.plan.facts


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def runs_as_picked(running: Running, picked: Picked) -> bool:
    """The running engine is the picked row, loading its file with the picked plan's facts."""
    supervisor, facts = running.supervisor, picked_facts(picked)
    if supervisor is None or picked.model_path is None or facts is None:
        return False
    if running.entry is None or picked.entry is None or running.entry.key != picked.entry.key:
        return False
    spec = supervisor.spec
    return _same_file(spec.model, picked.model_path) and spec.facts == facts


def record_as_picked(record: EngineRecord, picked: Picked) -> bool:
    """An engine left running (not ours yet) loads the picked file, by the same name, with
    the picked facts: starting it is adopting it, and what the panel then shows is true."""
    facts = picked_facts(picked)
    if picked.model_path is None or facts is None:
        return False
    return record.model == str(picked.model_path) and record.facts == facts


def switch_question(running: Running, name: str, picked: Picked, frees: str) -> str:
    """The confirmation before ``s`` stops what runs for the picked model."""
    assert running.supervisor is not None
    spec = running.supervisor.spec
    now = running.entry.name if running.entry else "the running engine"
    facts = picked_facts(picked)
    same_file = picked.model_path is not None and _same_file(spec.model, picked.model_path)
    if same_file and running.entry is not None and running.entry.name == name:
        runs = "" if spec.facts is None else f" runs with {spec.facts.describe()};"
        wanted = "" if facts is None else f" with {facts.describe()}"
        return f"{now} (pid {running.supervisor.pid}){runs} restart it as {name}{wanted}?"
    also = " (the same file under another name)" if same_file else ""
    return f"Stop {now} (pid {running.supervisor.pid}{frees}) and start {name}{also}?"


def left_running_question(record: EngineRecord, name: str) -> str:
    """The confirmation before ``s`` replaces an engine an earlier homelab left running."""
    facts = "" if record.facts is None else f", {record.facts.describe()}"
    what = f"{os.path.basename(record.model)} (pid {record.pid}{facts})"
    return f"An earlier homelab left {what} running. Stop it and start {name}?"
