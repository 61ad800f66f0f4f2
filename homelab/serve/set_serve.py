"""``homelab serve A B C`` / ``serve --models``: a set of models behind one gate URL.

The set is planned and placed as ``homelab plan --models`` places it
(:func:`~homelab.serve.model_set.plan_set`); its residents are loaded at start, one engine
each (:mod:`homelab.serve.set_engines`), the rest on demand by the gate's
:class:`~homelab.gate.model_pool.ModelPool`, which evicts by the same bytes the placement
adds. A record (``$HOMELAB_STATE_DIR/model-set.json``: the gate's URL, this process, the
ids) lets ``homelab status`` find the gate and show every model.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from homelab.gate.model_pool import ModelPool, SetModel
from homelab.gate.set_runner import SetGateRunner
from homelab.gate.settings import GateSettings
from homelab.serve.model_set import PlannedSet
from homelab.serve.set_engines import EngineRecipe, SupervisedEngines

SET_RECORD = "model-set.json"


@dataclass
class RunningSet:
    planned: PlannedSet
    runner: SetGateRunner
    engines: SupervisedEngines
    residents: tuple[str, ...]

    @property
    def url(self) -> str:
        assert self.runner.url is not None
        return self.runner.url

    def stop(self) -> None:
        """Stop the gate, then every engine; forget the record."""
        try:
            self.runner.stop()
        finally:
            self.engines.stop_all()
            _forget_record()


def set_parts(
    planned: PlannedSet,
) -> tuple[list[SetModel], dict[str, int], dict[str, EngineRecipe]]:
    """(the models the gate routes to, each device's usable bytes, how to start each)."""
    models: list[SetModel] = []
    recipes: dict[str, EngineRecipe] = {}
    for model in planned.models:
        plan = model.priced.plan
        costs = {cost.device: cost.total for cost in model.priced.costs}
        models.append(SetModel(model.priced.id, model.entry.aliases, costs))
        if plan is not None and model.argv:
            recipes[model.priced.id] = EngineRecipe(
                model.priced.id, model.argv, plan.model_path, plan
            )
    budgets = {name: budget.usable for name, budget in planned.placement.devices.items()}
    return models, budgets, recipes


def start_set(
    planned: PlannedSet,
    settings: GateSettings,
    *,
    idle_ttl_s: float | None = None,
    start_timeout_s: float = 600.0,
    executable: str | None = None,
) -> RunningSet:
    """The gate listening and the placement's residents loaded.

    Raises:
        HomelabError: the gate cannot listen, or a resident's engine failed to start.
    """
    from homelab.engine.kinds import engine_kind

    models, budgets, recipes = set_parts(planned)
    program = executable or engine_kind("llama.cpp").executable()
    engines = SupervisedEngines(recipes, program, start_timeout_s=start_timeout_s)

    def pool() -> ModelPool:
        return ModelPool(models, budgets, engines, settings, idle_ttl_s=idle_ttl_s)

    runner = SetGateRunner(settings, pool)
    residents = planned.placement.ids("resident")
    running = RunningSet(planned, runner, engines, residents)
    try:
        runner.start()
        runner.load(residents, start_timeout_s * max(1, len(residents)))
    except BaseException:
        running.stop()
        raise
    _write_record(running)
    return running


def record_path() -> Path:
    from homelab.paths import state_dir

    return state_dir() / SET_RECORD


def read_set_record() -> dict[str, object] | None:
    """The running set's record, when its process still runs; None otherwise."""
    import psutil

    try:
        data = json.loads(record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    record: dict[str, object] = data
    pid = record.get("pid")
    if not isinstance(pid, int) or not psutil.pid_exists(pid):
        return None
    return record


def _write_record(running: RunningSet) -> None:
    path = record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "pid": os.getpid(),
        "gate_url": running.url,
        "models": [m.priced.id for m in running.planned.models],
        "residents": list(running.residents),
        "started_at": time.time(),
    }
    path.write_text(json.dumps(data), encoding="utf-8")


def _forget_record() -> None:
    try:
        data = json.loads(record_path().read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("pid") == os.getpid():
            record_path().unlink()
    except (OSError, ValueError):
        pass
