"""``homelab plan --json``'s ``rung``: which rung of the offload ladder a plan stands on, and why."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.gguf.model_file import read_model
from homelab.gpu.report import CpuMemory, synthetic_report
from homelab.plan.placement import EVERY_BLOCK
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.units import GiB
from tests.factory import geometry, write_gguf
from tests.factory.dense import build_llama
from tests.factory.header_only import HeaderOnlyWriter, q4_k_m_rule, write_qwen3_30b_a3b_q4_k_m

RAM = CpuMemory(total=64 * GiB, available=48 * GiB)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("rung")
    return {
        "moe": write_gguf("qwen3moe", folder / "moe.gguf", n_layer=8, n_expert=8, n_ff_exp=512),
        "dense": write_gguf("llama", folder / "dense.gguf"),
    }


def _plan(path: Path, card: int | None, **asked: object) -> Plan:
    report = synthetic_report(card or GiB)
    if card is None:
        report = replace(report, devices=(), cpu=RAM)
    model = read_model(str(path))
    return make_plan(model, str(path), report, PlanRequest(**asked), ram=lambda: RAM)  # type: ignore[arg-type]


def _rung(plan: Plan) -> dict[str, str]:
    rung = plan_to_dict(plan, llama_server_argv(plan))["rung"]
    assert set(rung) == {"kind", "why"} and rung["why"]
    return rung


def test_everything_on_the_card(files: dict[str, Path]) -> None:
    plan = _plan(files["dense"], 16 * GiB)
    assert _rung(plan) == {
        "kind": "whole",
        "why": f"Everything fits on the card: {plan.settings.n_seq} × "
        f"{plan.candidate.allocation.ctx_per_slot:,} tokens.",
    }


def test_no_card_is_system_ram(files: dict[str, Path]) -> None:
    rung = _rung(_plan(files["moe"], None))
    assert rung["kind"] == "system_ram" and "system RAM" in rung["why"]


@pytest.mark.parametrize(("asked", "said"), [(3, "--n-cpu-moe 3"), (EVERY_BLOCK, "--cpu-moe")])
def test_the_person_s_experts_setting_is_the_reason(
    files: dict[str, Path], asked: int, said: str
) -> None:
    plan = _plan(files["moe"], 16 * GiB, n_cpu_moe=asked)
    rung = _rung(plan)
    n = plan.weights.n_cpu_moe
    assert rung["kind"] == "experts_in_ram"
    assert rung["why"].startswith(f"{said} was given: the experts of {n} of 8 blocks")


def _dense_8b(path: Path) -> Path:
    """A header-only Llama-3.1-8B-shaped Q4_K_M (4.9 GB): more than a 4 GiB card holds."""
    g = geometry("llama", n_layer=32, n_embd=4096, n_ff=14336, n_ctx_train=131072)
    mw = HeaderOnlyWriter(path, "llama", q4_k_m_rule(32, 0), n_vocab=128_256)
    mw.vocab()
    build_llama(mw, g)
    return mw.write()


def test_whole_layers_off_say_how_many_stay(tmp_path: Path, files: dict[str, Path]) -> None:
    dense = _plan(_dense_8b(tmp_path / "dense8b.gguf"), 4 * GiB, ctx=4096, parallel=1)
    assert dense.n_gpu_layers is not None
    rung = _rung(dense)
    assert rung["kind"] == "layers_off"
    blocks = f"{dense.n_gpu_layers - 1} of 32 blocks on the card"
    assert rung["why"].startswith("The weights do not fit on the card") and blocks in rung["why"]
    # a real-size MoE with --n-cpu-moe 0 given: whole layers leave, and the setting is said
    moe = tmp_path / "q3-30b.gguf"
    plain = _plan(write_qwen3_30b_a3b_q4_k_m(moe), 16 * GiB, n_cpu_moe=0)
    assert plain.n_gpu_layers is not None
    assert _rung(plain)["why"].startswith("--n-cpu-moe 0 was given, and the weights do not fit")


def test_an_explicit_context_is_not_called_short(files: dict[str, Path]) -> None:
    plan = _plan(files["moe"], 16 * GiB, ctx=4096)
    assert _rung(plan)["why"].startswith("Everything fits on the card")
