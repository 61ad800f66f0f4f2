"""The engines of a set of models: one supervised llama-server per loaded model (the choice
measured in docs/model-set.md), started and stopped for the gate's
:class:`~homelab.gate.model_pool.ModelPool` as it loads and unloads models.

Each engine runs the command line its model's plan gives (its own context, slots, cache
types, ``-ngl``/``--n-cpu-moe``) on a free loopback port, with its own random key, under
homelab's :class:`~homelab.engine.supervision.supervisor.Supervisor` (restarts with
backoff, a crash loop or a failure that would repeat ends the retries).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from homelab.engine.engine_key import new_engine_key
from homelab.engine.supervision.ports import LOOPBACK
from homelab.engine.supervision.readiness import EngineProfile
from homelab.engine.supervision.states import State, Transition
from homelab.engine.supervision.supervisor import EngineSpec, RestartPolicy, Supervisor
from homelab.errors import EngineError
from homelab.gate.model_pool import LoadedEngine
from homelab.plan.planner import Plan

LOAD_POLICY = RestartPolicy(max_crashes=3, backoff_first_s=0.5, backoff_max_s=5.0)
"""A set's engine is restarted after a crash as any engine is, but gives up sooner: its
requests wait for it, and a model that cannot run must answer them with why."""


@dataclass(frozen=True, slots=True)
class EngineRecipe:
    """How to start one model's engine."""

    id: str
    argv: tuple[str, ...]
    """Its command line as its plan gives it (any ``--port``; the program's name first)."""
    model_path: str
    plan: Plan | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    """What its environment adds (``CUDA_DEVICE_ORDER=PCI_BUS_ID`` when its plan pins a card,
    so that ``--device CUDAn`` is NVML's GPU n)."""


def with_port(argv: Sequence[str], executable: str, port: int) -> tuple[str, ...]:
    """``argv`` run by ``executable`` on ``port`` (``--host`` and ``--port`` replaced)."""
    out = [executable]
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
            continue
        if arg in ("--port", "--host"):
            skip = True
            continue
        out.append(arg)
    return (*out, "--host", LOOPBACK, "--port", str(port))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


class SupervisedEngines:
    """An :class:`~homelab.gate.model_pool.EngineLoader` of one supervised llama-server per
    loaded model."""

    def __init__(
        self,
        recipes: Mapping[str, EngineRecipe],
        executable: str,
        *,
        start_timeout_s: float = 600.0,
        log_dir: Path | None = None,
        on_crash: Callable[[str, Transition], None] | None = None,
    ) -> None:
        self.recipes = dict(recipes)
        self.executable = executable
        self.start_timeout_s = start_timeout_s
        self.log_dir = log_dir
        self.on_crash = on_crash
        """Told each crash of a model's engine (its supervisor restarts it): the keeper's note."""
        self.running: dict[str, Supervisor] = {}

    async def load(self, model: str) -> LoadedEngine:
        return await asyncio.to_thread(self._start, model)

    async def unload(self, model: str) -> None:
        await asyncio.to_thread(self._stop, model)

    def pids(self) -> dict[str, int | None]:
        return {ident: sup.pid for ident, sup in self.running.items()}

    def stop_all(self) -> None:
        for ident in list(self.running):
            self._stop(ident)

    def recipe_of(self, model: str, port: int, key: str | None) -> tuple[EngineSpec, EngineProfile]:
        """What ``model``'s engine is started with on ``port``: its argv (its plan's, the
        card it pins included) and its profile (the environment its plan adds)."""
        from homelab.engine.llamacpp.diagnose import llama_server_profile

        recipe = self.recipes[model]
        spec = EngineSpec(
            argv=with_port(recipe.argv, self.executable, port),
            model=recipe.model_path,
            host=LOOPBACK,
            port=port,
            start_timeout_s=self.start_timeout_s,
            api_key=key,
        )
        profile = llama_server_profile(recipe.plan, Path(recipe.model_path).name)
        if recipe.env:
            profile = replace(profile, env={**profile.env, **recipe.env})
        return spec, profile

    def _start(self, model: str) -> LoadedEngine:
        key, port = new_engine_key(), free_port()
        spec, profile = self.recipe_of(model, port, key)
        supervisor = Supervisor(spec, profile, policy=LOAD_POLICY, log_dir=self.log_dir)
        if self.on_crash is not None:
            supervisor.subscribe(self._crashed(model))
        supervisor.start()
        try:
            supervisor.wait_ready(self.start_timeout_s)
        except BaseException as error:
            supervisor.stop()
            supervisor.wait_stopped(30.0)
            if isinstance(error, EngineError):
                raise EngineError(f"{model}: {error.message}") from None
            raise
        self.running[model] = supervisor
        url = supervisor.url
        if url is None:
            raise EngineError(f"{model}: its engine is ready but has no URL")
        return LoadedEngine(url, key, None)

    def _crashed(self, model: str) -> Callable[[Transition], None]:
        def changed(transition: Transition) -> None:
            if transition.state is State.CRASHED and self.on_crash is not None:
                self.on_crash(model, transition)

        return changed

    def _stop(self, model: str) -> None:
        supervisor = self.running.pop(model, None)
        if supervisor is not None:
            supervisor.stop()
            supervisor.wait_stopped(60.0)
