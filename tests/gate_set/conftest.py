"""Fixtures of the set-of-models gate tests: three small real models (SmolLM2 and two GGUFs
the factory writes with real geometry) and ``set_gate(...)``: a started gate of a set in
front of real llama-servers, one supervised per loaded model (stopped at teardown)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest

from homelab.gate.model_pool import ModelPool, SetModel
from homelab.gate.set_runner import SetGateRunner
from homelab.gate.settings import GateSettings
from homelab.serve.set_engines import EngineRecipe, SupervisedEngines

ENGINE_ARGS = ("-c", "1024", "-np", "1", "-t", "1", "--cache-ram", "0", "-ngl", "0")
TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def three_models(smollm2_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """id → GGUF: ``smol`` (SmolLM2), ``llama`` and ``qwen3`` (factory, real layer geometry)."""
    from tests.factory import write_gguf

    folder = tmp_path_factory.mktemp("set-models")
    return {
        "smol": smollm2_gguf,
        "llama": write_gguf("llama", folder / "tiny-llama.gguf", name="tiny-llama", seed=1),
        "qwen3": write_gguf("qwen3", folder / "tiny-qwen3.gguf", name="tiny-qwen3", seed=2),
    }


class SetUnderTest:
    def __init__(self, runner: SetGateRunner, engines: SupervisedEngines) -> None:
        self.runner, self.engines = runner, engines

    @property
    def url(self) -> str:
        assert self.runner.url is not None
        return self.runner.url

    @property
    def pool(self) -> ModelPool:
        assert self.runner.pool is not None
        return self.runner.pool


@pytest.fixture
def set_gate(llama_server_bin: Path, tmp_path: Path) -> Iterator[Callable[..., SetUnderTest]]:
    """``set_gate(paths, costs, budget, resident, aliases={}, **settings)``."""
    made: list[SetUnderTest] = []

    def make(
        paths: Mapping[str, Path],
        costs: Mapping[str, int],
        budget: int,
        resident: Sequence[str],
        aliases: Mapping[str, tuple[str, ...]] | None = None,
        idle_ttl_s: float | None = None,
        **settings: object,
    ) -> SetUnderTest:
        recipes = {
            ident: EngineRecipe(
                ident,
                ("llama-server", "-m", str(path), *ENGINE_ARGS, "--alias", ident),
                str(path),
            )
            for ident, path in paths.items()
        }
        engines = SupervisedEngines(
            recipes, str(llama_server_bin), start_timeout_s=120, log_dir=tmp_path / "logs"
        )
        models = [
            SetModel(ident, (aliases or {}).get(ident, ()), {"CPU": costs[ident]})
            for ident in paths
        ]
        settings.setdefault("port", 0)
        gate_settings = GateSettings(**settings)  # type: ignore[arg-type]

        def pool() -> ModelPool:
            return ModelPool(models, {"CPU": budget}, engines, gate_settings, idle_ttl_s=idle_ttl_s)

        runner = SetGateRunner(gate_settings, pool)
        under = SetUnderTest(runner, engines)
        made.append(under)
        runner.start()
        runner.load(resident, TIMEOUT_S)
        return under

    yield make
    for under in made:
        under.runner.stop()
        under.engines.stop_all()


def chat(url: str, model: str | None, *, max_tokens: int = 2, **extra: object) -> httpx.Response:
    body: dict[str, object] = {
        "messages": [{"role": "user", "content": "Say hi"}],
        "max_tokens": max_tokens,
        "temperature": 0,
        **extra,
    }
    if model is not None:
        body["model"] = model
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT_S, trust_env=False)


def metric(url: str, name: str) -> float:
    """The sum of every sample of ``name`` on the gate's ``/metrics``."""
    text = httpx.get(f"{url}/metrics", timeout=30, trust_env=False).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            head, _, value = line.rpartition(" ")
            if head.split("{")[0] == name:
                total += float(value)
    return total
