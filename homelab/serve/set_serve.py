"""``homelab serve A B C`` / ``serve --models``: a set of models behind one gate URL.

The set is planned and placed as ``homelab plan --models`` places it
(:func:`~homelab.serve.model_set.plan_set`); its residents are loaded at start, one engine
each (:mod:`homelab.serve.set_engines`), the rest on demand by the gate's
:class:`~homelab.gate.model_pool.ModelPool`, which evicts by the same bytes the placement
adds. A record (``$HOMELAB_STATE_DIR/model-set.json``: the gate's URL, this process, the
ids) lets ``homelab status`` find the gate and show every model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from homelab.engine.supervision.restarts import Restart
from homelab.engine.supervision.set_record import (
    SetMember,
    SetRecord,
    forget_set,
    new_record,
    read_set,
    read_set_json,
    write_set,
)
from homelab.engine.supervision.states import Transition
from homelab.errors import AlreadyServed, EngineError
from homelab.gate.model_pool import ModelPool, SetModel
from homelab.gate.set_runner import SetGateRunner
from homelab.gate.settings import GateSettings
from homelab.plan.planner import Plan
from homelab.serve.model_set import PlannedSet
from homelab.serve.set_engines import EngineRecipe, SupervisedEngines


@dataclass
class RunningSet:
    planned: PlannedSet
    runner: SetGateRunner
    engines: SupervisedEngines
    residents: tuple[str, ...]
    record: SetRecord | None = field(default=None, repr=False)

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

    def serving(self) -> bool:
        """True while the set's gate runs."""
        return self.runner.serving

    def note_restarts(self, restarts: tuple[Restart, ...]) -> None:
        """Rewrite the record with its keeper's restarts (``status`` shows them)."""
        if self.record is not None:
            self.record = replace(self.record, restarts=restarts)
            write_set(self.record)


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
                model.priced.id, model.argv, plan.model_path, plan, pinning_env(plan)
            )
    budgets = {name: budget.usable for name, budget in planned.placement.devices.items()}
    return models, budgets, recipes


def pinning_env(plan: Plan) -> dict[str, str]:
    """What a set's engine's environment adds, as one model's serve adds it: its plan pins a
    card (``--device CUDAn``), so CUDA must number the cards as NVML does."""
    from homelab.plan.devices import CUDA_ORDER_ENV

    pinned = any(d.device.pin and d.device.cuda for d in plan.devices)
    return dict(CUDA_ORDER_ENV) if pinned else {}


def start_set(
    planned: PlannedSet,
    settings: GateSettings,
    *,
    idle_ttl_s: float | None = None,
    start_timeout_s: float = 600.0,
    executable: str | None = None,
    kept: bool = False,
    on_crash: Callable[[str, Transition], None] | None = None,
) -> RunningSet:
    """The gate listening and the placement's residents loaded; ``kept``: this process is
    the set's keeper (the record says so); ``on_crash``: told each engine's crash.

    Raises:
        HomelabError: the gate cannot listen, or a resident's engine failed to start.
    """
    from homelab.engine.kinds import engine_kind

    models, budgets, recipes = set_parts(planned)
    program = executable or engine_kind("llama.cpp").executable()
    engines = SupervisedEngines(
        recipes, program, start_timeout_s=start_timeout_s, on_crash=on_crash
    )

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
    running.record = new_record(
        running.url,
        set_members(planned),
        residents,
        settings.max_tokens_cap,
        kept=kept,
    )
    write_set(running.record)
    return running


def served_already(planned: PlannedSet) -> None:
    """Before a set starts: what runs decides, as it does for one model.

    Raises:
        AlreadyServed: this same set (its ids and files) is kept by homelab's keeper.
        EngineError: another set runs, this set in another homelab's foreground serve, or
            one model's engine runs.
    """
    from homelab.engine.supervision.ownership import running
    from homelab.engine.supervision.state_file import StateFile

    record = read_set()
    if record is not None:
        by = (
            f"kept by homelab's keeper (pid {record.pid})"
            if record.kept
            else f"served by homelab pid {record.pid}"
        )
        where = f"{record.gate_url}/v1, {by}"
        wanted = tuple(
            (m.priced.id, m.priced.plan and m.priced.plan.model_path) for m in planned.models
        )
        runs = tuple((m.id, m.model) for m in record.members)
        if wanted != runs:
            raise EngineError(
                f"another set of models is served at {where}: {', '.join(record.ids)}",
                hint="`stop` stops it; then serve this set",
                title="Engine already running",
            )
        if not record.kept:
            raise EngineError(
                f"this set of models is already served at {where}",
                hint="use it as it is; `stop` stops it",
                title="Engine already running",
            )
        raise AlreadyServed(f"this set of models is already served at {where}", url=record.gate_url)
    now = running(StateFile())
    if now.record is not None:
        rec = now.record
        raise EngineError(
            f"{rec.engine} (pid {rec.pid}) at {rec.public_url} already serves {rec.model}",
            hint="`stop` stops it; then serve the set",
            title="Engine already running",
        )


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
