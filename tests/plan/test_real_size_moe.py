"""A real-size Qwen3-30B-A3B ``Q4_K_M`` (18.6 GB; header only, the data a sparse hole) planned
on recorded 16 GB and 24 GB cards: the offload ladder's rung, the context and slots it
gives an agent, and the bytes on each side checked against the tensor table's own sums.

The header (``tests.factory.header_only``) has the real geometry — 48 blocks, 128 experts
(8 used) of 768, hidden 2048, 32 q heads and 4 KV heads of 128, vocabulary 151,936 — and
the per-tensor types llama-quantize's ``Q4_K_M`` gives them (its rules are written out
there from the pinned ``src/llama-quant.cpp``). The trained context is the 2507 release's
262,144 (the tensors are the same as the first release's), so an agent's 100,000 tokens
are the workload's, not the model's, cap.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model
from homelab.gpu.probe import probe
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.cuda_padding import cuda_alloc_size
from homelab.plan.placement import plan_ram
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.serialize import plan_to_dict
from homelab.plan.workload import AGENT
from homelab.units import GiB
from tests.factory.header_only import QWEN3_30B_A3B_VOCAB, write_qwen3_30b_a3b_q4_k_m

GPU = Path(__file__).resolve().parents[1] / "fixtures" / "gpu"
RAM = CpuMemory(total=64 * GiB, available=48 * GiB)
"""A 64 GB desktop with 48 GB free: the experts' side is never what decides here."""
EXPERT = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight$")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> GgufModel:
    path = tmp_path_factory.mktemp("30b") / "Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf"
    return read_model(str(write_qwen3_30b_a3b_q4_k_m(path, n_ctx_train=262_144)))


def _card(name: str) -> GpuReport:
    return probe(snapshot=GPU / f"{name}.json", window_s=0)


def _plan(model: GgufModel, card: str, n_cpu_moe: int | None = None) -> Plan:
    request = PlanRequest(workload=AGENT, n_cpu_moe=n_cpu_moe)
    return make_plan(model, "q3-30b.gguf", _card(card), request, ram=lambda: RAM)


def test_the_header_is_a_q4_k_m_30b_a3b(model: GgufModel) -> None:
    names = {t.name: t for t in model.tensors}
    assert len(model.tensors) == 3 + 48 * 12  # embeddings, norm, output; 12 per block
    assert names["token_embd.weight"].shape == (2048, QWEN3_30B_A3B_VOCAB)
    assert names["blk.0.ffn_down_exps.weight"].shape == (768, 2048, 128)
    types = {t.type_name for t in model.tensors}
    assert types == {"Q4_K", "Q6_K", "F32"}
    # use_more_bits: blocks 0-5, 42-47 and every third between (8, 11, ..., 41): 24 of 48
    q6_down = [b for b in range(48) if names[f"blk.{b}.ffn_down_exps.weight"].type_name == "Q6_K"]
    assert q6_down == [*range(6), *range(8, 42, 3), *range(42, 48)]
    assert 18.4e9 < (model.weights_bytes or 0) < 18.7e9  # the real file: 18.6 GB


def _table_sums(model: GgufModel, n_cpu_moe: int) -> tuple[int, int, int]:
    """(experts kept in RAM, every tensor in RAM, the card's tensors with CUDA's padding),
    summed straight from the tensor table."""
    experts = embedding = device = 0
    for t in model.tensors:
        match = EXPERT.match(t.name)
        size = t.n_bytes or 0
        if match and int(match.group(1)) < n_cpu_moe:
            experts += size
        elif t.name == "token_embd.weight":
            embedding += size
        else:
            device += cuda_alloc_size(t.ggml_type, t.shape, size)
    return experts, experts + embedding, device


@pytest.mark.parametrize(
    ("card", "gives_more_than_whole"),
    [("rtx4060ti16_xorg", False), ("rtx3090_wayland", True)],
)
def test_rung_2_keeps_the_fewest_blocks_experts_in_ram_for_one_agent(
    model: GgufModel, card: str, gives_more_than_whole: bool
) -> None:
    plan = _plan(model, card)
    n = plan.weights.n_cpu_moe
    alloc = plan.candidate.allocation
    # rung 2: experts of the first n blocks in RAM, every layer (and its KV) on the card
    assert 0 < n < 48 and plan.n_gpu_layers is None and plan.verdict == "fits"
    assert alloc.ctx_per_slot >= AGENT.tokens_per_slot and plan.settings.n_seq >= 1
    assert plan.devices[0].first_block == 0 and plan.devices[0].n_blocks == 48
    # the fewest: one block fewer does not serve the agent
    fewer = _plan(model, card, n - 1)
    assert (
        fewer.verdict != "fits" or fewer.candidate.allocation.ctx_per_slot < AGENT.tokens_per_slot
    )
    # bytes on each side, from the tensor table
    experts, in_ram, device = _table_sums(model, n)
    ram = plan_ram(plan)
    assert ram is not None and (ram.experts, ram.tensors) == (experts, in_ram)
    assert plan.weights_on_device == device
    kept = [t for t in model.tensors if EXPERT.match(t.name) and int(t.name.split(".")[1]) < n]
    first = min(t.offset for t in [*kept, model.tensors[0]])
    last = max(t.offset + (t.n_bytes or 0) for t in [*kept, model.tensors[0]])
    assert ram.mapped == last - first  # one CPU_Mapped span over the file
    argv = llama_server_argv(plan)
    assert argv[argv.index("--n-cpu-moe") + 1] == str(n)
    data = plan_to_dict(plan, argv)
    assert data["rung"]["kind"] == "experts_in_ram" and f"{n} layers" in data["rung"]["why"]
    assert data["n_cpu_moe"] == n and data["ram"]["experts"] == experts
    whole = _plan(model, card, 0)  # what the plan gave before the ladder
    assert (whole.verdict == "fits") is gives_more_than_whole
    assert whole.candidate.allocation.ctx_per_slot < AGENT.tokens_per_slot


def test_the_16_gb_card_without_the_ladder_sends_whole_layers_off(model: GgufModel) -> None:
    plain = _plan(model, "rtx4060ti16_xorg", 0)
    assert plain.verdict == "partial" and plain.n_gpu_layers is not None
    assert plain.n_gpu_layers - 1 < 48 and plain.settings.n_seq == 1
    assert plan_to_dict(plain, [])["rung"]["kind"] == "layers_off"
    # its card holds the last blocks whole, padded as CUDA pads them
    first = 48 - (plain.n_gpu_layers - 1)
    on_card = sum(
        cuda_alloc_size(t.ggml_type, t.shape, t.n_bytes or 0)
        for t in model.tensors
        if t.name != "token_embd.weight"
        and (not t.name.startswith("blk.") or int(t.name.split(".")[1]) >= first)
    )
    assert plain.weights_on_device == on_card


def test_a_headless_24_gb_card_holds_it_whole_for_one_agent(model: GgufModel) -> None:
    plan = _plan(model, "rtx3090_headless")
    assert plan.weights.n_cpu_moe == 0 and plan.n_gpu_layers is None
    assert plan.candidate.allocation.ctx_per_slot >= AGENT.tokens_per_slot
    assert plan_to_dict(plan, [])["rung"] == {
        "kind": "whole",
        "why": f"Everything fits on the card: {plan.settings.n_seq} × "
        f"{plan.candidate.allocation.ctx_per_slot:,} tokens.",
    }
    assert plan.weights_on_device == _table_sums(model, 0)[2]
