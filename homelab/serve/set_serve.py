"""``homelab serve A B C`` / ``serve --models``: a set of models behind one gate URL.

The set is planned and placed as ``homelab plan --models`` places it
(:func:`~homelab.serve.model_set.plan_set`); its residents are loaded at start, one engine
each (:mod:`homelab.serve.set_engines`), the rest on demand by the gate's
:class:`~homelab.gate.model_pool.ModelPool`, which evicts by the same bytes the placement
adds. A record (``$HOMELAB_STATE_DIR/model-set.json``: the gate's URL, this process, the
ids) lets ``homelab status`` find the gate and show every model.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.engine.supervision.set_record import (
    SetMember,
    forget_set,
    new_record,
    read_set_json,
    write_set,
)
from homelab.gate.model_pool import ModelPool, SetModel
from homelab.gate.set_runner import SetGateRunner
from homelab.gate.settings import GateSettings
from homelab.serve.model_set import PlannedSet
from homelab.serve.set_engines import EngineRecipe, SupervisedEngines


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
            forget_set()


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
    _write_record(running, settings)
    return running


def read_set_record() -> dict[str, object] | None:
    """The running set's record, when its process still runs; None otherwise."""
    return read_set_json()


def set_members(planned: PlannedSet) -> tuple[SetMember, ...]:
    """Each model of ``planned`` as the record keeps it (its workload, bytes and facts)."""
    from homelab.engine.llamacpp.kind import plan_facts

    return tuple(
        SetMember(
            model.priced.id,
            model.entry.aliases,
            model.workload.name,
            {cost.device: cost.total for cost in model.priced.costs},
            None if model.priced.plan is None else plan_facts(model.priced.plan),
            None if model.priced.plan is None else model.priced.plan.model_path,
        )
        for model in planned.models
    )


def _write_record(running: RunningSet, settings: GateSettings) -> None:
    write_set(
        new_record(
            running.url, set_members(running.planned), running.residents, settings.max_tokens_cap
        )
    )
