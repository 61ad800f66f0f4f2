"""A set of models on a machine of several cards (recorded snapshots, header-only GGUFs): a
model that does not fit beside the residents on the card its own plan chose is tried on the
other card, planned alone there; the placement, ``plan --models`` and ``--json`` say which
card each model is on; its engine is started pinned to that card (``--device CUDAn`` with
``CUDA_DEVICE_ORDER=PCI_BUS_ID``, as one model's serve pins it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.engine.options import plan_options
from homelab.plan.models_file import ModelEntry
from homelab.plan.workload import AGENT
from homelab.serve.model_set import PlannedSet, plan_set
from homelab.serve.set_engines import SupervisedEngines
from homelab.serve.set_serve import set_parts
from tests.plan.set_models import write_all

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"
TWO_EQUAL = FIXTURES / "constructed_two_equal.json"  # two empty RTX 3090s
TWO_GPUS = FIXTURES / "two_gpus.json"  # a 3090 with the desktop, a 3060 another engine fills
KEYS = ("coder-8b", "chat-14b", "fim-1b")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("set-cards"))


def _on(snapshot: Path, models: dict[str, Path], **options: object) -> PlannedSet:
    entries = [ModelEntry(str(models[k]), AGENT, id=k) for k in KEYS]
    return plan_set(entries, plan_options(gpu_snapshot=snapshot, sample_seconds=0, **options))


def _member(planned: PlannedSet, ident: str):
    return next(m for m in planned.placement.members if m.model.id == ident)


def test_a_model_that_does_not_fit_beside_the_residents_goes_on_the_other_card(
    models: dict[str, Path],
) -> None:
    planned = _on(TWO_EQUAL, models)
    placement = planned.placement
    assert placement.ids("resident") == KEYS and placement.ids("swaps") == ()
    coder, chat, fim = (_member(planned, k) for k in KEYS)
    assert coder.model.cards == ("CUDA0",) and fim.model.cards == ("CUDA0",)
    assert chat.model.cards == ("CUDA1",) and chat.moved and not coder.moved
    assert "on CUDA0" in chat.why and "on CUDA1 it fits beside them" in chat.why
    for name in ("CUDA0", "CUDA1"):
        assert 0 < placement.used(name) <= placement.devices[name].usable
    assert placement.used("CUDA1") == sum(c.total for c in chat.model.costs)
    # the set's own model is that card's plan, and so is the command line it is started with
    model = next(m for m in planned.models if m.priced.id == "chat-14b")
    assert model.priced is chat.model
    argv = list(model.argv)
    assert argv[argv.index("--device") + 1] == "CUDA1"


def test_each_engine_is_started_pinned_to_its_card(models: dict[str, Path]) -> None:
    _, _, recipes = set_parts(_on(TWO_EQUAL, models))
    engines = SupervisedEngines(recipes, "/opt/llama-server")
    for ident, card in (("coder-8b", "CUDA0"), ("chat-14b", "CUDA1"), ("fim-1b", "CUDA0")):
        spec, profile = engines.recipe_of(ident, 41234, "key")
        argv = list(spec.argv)
        assert argv[0] == "/opt/llama-server"
        assert argv[argv.index("--device") + 1] == card
        assert argv[-4:] == ["--host", "127.0.0.1", "--port", "41234"]
        assert profile.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_card_without_room_leaves_the_model_swapping(models: dict[str, Path]) -> None:
    planned = _on(TWO_GPUS, models)  # the 3060 holds 2.28 GiB usable: chat-14b does not fit
    chat = _member(planned, "chat-14b")
    assert chat.status == "swaps" and chat.model.cards == ("CUDA0",) and not chat.moved
    pinned = _on(TWO_EQUAL, models, gpu=0)  # a card asked for: the set stays on it
    assert _member(pinned, "chat-14b").status == "swaps"
    assert set(pinned.placement.devices) == {"CUDA0"}


def test_plan_models_says_the_card_of_each_model(
    capsys: pytest.CaptureFixture[str], models: dict[str, Path]
) -> None:
    args = [str(models[k]) for k in KEYS]
    card = ["--gpu-snapshot", str(TWO_EQUAL), "--sample-seconds", "0", "--workload", "agent"]
    assert main(["plan", *args, *card, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["device"] for d in data["devices"]] == ["CUDA0", "CUDA1"]
    cards = {m["id"]: (m["cards"], m["moved"], m["status"]) for m in data["models"]}
    assert cards == {
        "coder-8b-Q4_K_M": (["CUDA0"], False, "resident"),
        "chat-14b-Q4_K_M": (["CUDA1"], True, "resident"),
        "fim-1b-Q4_K_M": (["CUDA0"], False, "resident"),
    }
    assert main(["plan", *args, *card]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "2. chat-14b-Q4_K_M (agent, 1 × 100,096 tokens): fits alone, on CUDA1" in lines
    assert any(line.startswith("Resident on CUDA1: chat-14b-Q4_K_M = ") for line in lines)
    assert any(line.startswith("On another card: chat-14b-Q4_K_M: needs ") for line in lines)
