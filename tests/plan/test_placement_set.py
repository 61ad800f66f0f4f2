"""A set of models placed on one card: each priced as ``homelab plan`` prices it alone, the
card's fixed costs counted once, the most wanted resident together, the rest swapping with
whom they evict; a model that does not fit even alone keeps its own verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from homelab.cli import build_parser
from homelab.cli.plan_cmd import prepared_from_args
from homelab.engine.options import plan_options
from homelab.gpu.probe import probe
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.budget import device_budget
from homelab.plan.models_file import ModelEntry, ModelsFileError
from homelab.plan.workload import AGENT, CHAT, FIM
from homelab.serve.model_set import PlannedSet, plan_set
from homelab.units import GiB
from tests.plan.set_models import write_all

FIXTURES = Path(__file__).parent.parent / "fixtures" / "gpu"
RTX3090 = FIXTURES / "rtx3090_headless.json"


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("set"))


def _entries(models: dict[str, Path], *keys: str) -> list[ModelEntry]:
    shapes = {
        "coder-8b": (AGENT, None),
        "fim-1b": (FIM, None),
        "chat-14b": (CHAT, 2),
        "big-70b": (CHAT, None),
    }
    return [ModelEntry(str(models[k]), shapes[k][0], shapes[k][1], id=k) for k in keys]


def _on(card: Path | int, entries: list[ModelEntry]) -> PlannedSet:
    if isinstance(card, int):
        return plan_set(entries, plan_options(), report=synthetic_report(card))
    return plan_set(entries, plan_options(gpu_snapshot=card, sample_seconds=0))


def _bytes(planned: PlannedSet, ident: str) -> int:
    member = next(m for m in planned.placement.members if m.model.id == ident)
    return sum(c.total for c in member.model.costs)


def test_two_resident_a_third_swaps_evicting_the_least_wanted_one_too_big(
    models: dict[str, Path],
) -> None:
    planned = _on(RTX3090, _entries(models, "coder-8b", "fim-1b", "chat-14b", "big-70b"))
    placement = planned.placement
    usable = placement.devices["CUDA0"].usable
    coder, fim, chat = (_bytes(planned, k) for k in ("coder-8b", "fim-1b", "chat-14b"))
    # the numbers that make the case: two fit together, not the third; the third fits alone
    assert coder + fim <= usable < coder + fim + chat
    assert chat <= usable - coder  # evicting the least wanted resident is enough
    assert placement.ids("resident") == ("coder-8b", "fim-1b")
    assert placement.used("CUDA0") == coder + fim
    swap = placement.members[2]
    assert (swap.status, swap.model.verdict, swap.evicts) == ("swaps", "fits", ("fim-1b",))
    assert "loading it unloads fim-1b" in swap.why
    big = placement.members[3]
    assert (big.status, big.model.verdict, big.evicts) == ("does_not_fit", "partial", ())
    assert planned.first_fits


def test_the_least_recently_used_go_first_until_it_fits(models: dict[str, Path]) -> None:
    # offline, least recently used = least wanted: the last listed resident goes first
    planned = _on(RTX3090, _entries(models, "fim-1b", "coder-8b", "chat-14b"))
    usable = planned.placement.devices["CUDA0"].usable
    chat = _bytes(planned, "chat-14b")
    assert chat > usable - _bytes(planned, "fim-1b") - _bytes(planned, "coder-8b")
    assert chat <= usable - _bytes(planned, "fim-1b")
    assert planned.placement.members[2].evicts == ("coder-8b",)


def test_each_model_is_priced_exactly_as_plan_prices_it_alone(models: dict[str, Path]) -> None:
    planned = _on(RTX3090, _entries(models, "coder-8b", "fim-1b", "chat-14b"))
    for model, flags in (
        ("coder-8b", ["--workload", "agent", "--parallel", "1"]),
        ("fim-1b", ["--workload", "fim", "--parallel", "2"]),
        ("chat-14b", ["--workload", "chat", "--parallel", "2"]),
    ):
        argv = ["plan", str(models[model]), "--gpu-snapshot", str(RTX3090), *flags]
        alone = prepared_from_args(build_parser().parse_args([*argv, "--sample-seconds", "0"]))
        share = alone.plan.plan.devices[0]
        cost = next(m for m in planned.placement.members if m.model.id == model).model.costs[0]
        assert (cost.weights, cost.kv, cost.compute + cost.context) == (
            share.weights,
            share.kv,
            share.engine.total,
        )


def test_the_cards_fixed_costs_are_counted_once(models: dict[str, Path]) -> None:
    entries = _entries(models, "coder-8b", "fim-1b")
    on_3090 = _on(RTX3090, entries)
    card = device_budget(probe(snapshot=RTX3090, window_s=0))
    assert on_3090.placement.devices["CUDA0"].usable == card.usable
    for model in on_3090.models:  # each priced against the whole card, not a share of it
        assert model.priced.plan is not None
        assert model.priced.plan.budget.usable == card.usable
    # a card exactly as large as the card's fixed costs (once) and the two models holds both
    both = _bytes(on_3090, "coder-8b") + _bytes(on_3090, "fim-1b")
    fixed = 32 * GiB - device_budget(synthetic_report(32 * GiB)).usable
    exact = _on(fixed + both, entries).placement
    assert exact.ids("resident") == ("coder-8b", "fim-1b")
    assert exact.devices["CUDA0"].usable - exact.used("CUDA0") == 0
    one_byte_less = _on(fixed + both - 1, entries).placement
    assert one_byte_less.ids("resident") == ("coder-8b",)
    assert one_byte_less.members[1].status == "swaps"


def test_without_a_card_the_set_is_placed_in_system_ram(models: dict[str, Path]) -> None:
    ram = CpuMemory(total=64 * GiB, available=40 * GiB)
    report = replace(synthetic_report(GiB), devices=(), cpu=ram)
    entries = _entries(models, "coder-8b", "fim-1b", "big-70b")
    planned = plan_set(entries, plan_options(), report=report)
    placement = planned.placement
    assert list(placement.devices) == ["CPU"]
    assert placement.devices["CPU"].kind == "cpu"
    assert placement.devices["CPU"].usable == device_budget(report).usable
    assert all(c.context == 0 for m in planned.models for c in m.priced.costs)
    assert placement.ids("resident") == ("coder-8b", "fim-1b")
    big = placement.members[2]
    assert big.status == "does_not_fit" and big.model.plan is None
    assert big.model.problem and "does not fit even alone" in big.why


def test_the_first_not_fitting_is_said(models: dict[str, Path]) -> None:
    planned = _on(RTX3090, _entries(models, "big-70b", "fim-1b"))
    assert not planned.first_fits
    assert planned.placement.ids("resident") == ("fim-1b",)


def test_derived_ids_that_collide_are_refused(models: dict[str, Path]) -> None:
    twice = [ModelEntry(str(models["fim-1b"]), FIM), ModelEntry(str(models["fim-1b"]), CHAT)]
    with pytest.raises(ModelsFileError, match="both have the id 'fim-1b-Q4_K_M'"):
        _on(RTX3090, twice)
    clash = [
        ModelEntry(str(models["fim-1b"]), FIM),
        ModelEntry(str(models["coder-8b"]), AGENT, aliases=("fim-*",)),
    ]
    with pytest.raises(ModelsFileError, match="alias 'fim-\\*' of model 2 also matches"):
        _on(RTX3090, clash)


def test_a_set_where_nothing_fits_still_names_the_card(models: dict[str, Path]) -> None:
    planned = _on(300 * 1024 * 1024, _entries(models, "fim-1b", "coder-8b"))
    placement = planned.placement
    assert list(placement.devices) == ["CUDA0"]
    assert placement.devices["CUDA0"].total == 300 * 1024 * 1024
    assert placement.ids("does_not_fit") == ("fim-1b", "coder-8b") and not planned.first_fits
    assert all(m.model.plan is None and m.model.problem for m in placement.members)
