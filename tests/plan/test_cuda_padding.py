"""CUDA's row padding of quantized tensors, priced in a card's weights (and only a card's).

The rule, from the pinned llama.cpp (``ggml-cuda.cu``, ``ggml_backend_cuda_buffer_type_get_alloc_size``;
``MATRIX_ROW_PADDING`` 512 in ``ggml-cuda/common.cuh``; alignment 128): a quantized tensor
whose ne0 is not a multiple of 512 gets ``ggml_row_size(type, 512 - ne0 % 512)`` bytes more,
once; then every tensor is rounded up to 128 bytes (``ggml-alloc.c``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from homelab.gguf.ggml_types import ggml_type, tensor_bytes
from homelab.gguf.model_file import read_model
from homelab.gpu.report import CpuMemory, GpuReport, synthetic_report
from homelab.plan.budget import place_weights
from homelab.plan.cuda_padding import cuda_alloc_size
from homelab.plan.planner import PlanRequest, make_plan
from homelab.plan.remote_device import RemoteDevice
from homelab.units import GiB
from tests.factory import write_gguf


def _aligned(n: int) -> int:
    return -(-n // 128) * 128


@pytest.mark.parametrize(
    ("type_name", "shape", "expected"),
    [
        # Q4_K: 144 bytes per 256 values. 768 values: 256 more values' worth, one 144-byte block
        ("Q4_K", (768, 2048, 128), _aligned(768 // 256 * 144 * 2048 * 128 + 144)),
        ("Q4_K", (2048, 768), 2048 // 256 * 144 * 768),  # a multiple of 512: no pad
        ("Q6_K", (768, 2048), _aligned(3 * 210 * 2048 + 210)),  # Q6_K: 210 bytes per 256
        # Q8_0: 34 bytes per 32; ne0 96 -> 416 more values (13 blocks), then 128-aligned
        ("Q8_0", (96, 4), _aligned(3 * 34 * 4 + 13 * 34)),
        ("F32", (100,), 512),  # plain types are not padded, only aligned (400 -> 512)
        ("F16", (768, 3), 768 * 2 * 3),  # F16 rows are never padded
    ],
)
def test_the_rule(type_name: str, shape: tuple[int, ...], expected: int) -> None:
    kind = ggml_type(type_name).type_id
    n_bytes = tensor_bytes(kind, shape)
    assert n_bytes is not None
    assert cuda_alloc_size(kind, shape, n_bytes) == expected


def test_an_unknown_type_is_aligned_only() -> None:
    assert cuda_alloc_size(999, (768, 2), 1000) == 1024


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny qwen3moe in Q8_0 whose rows (n_embd 96, experts of 64) are not 512 wide."""
    folder = tmp_path_factory.mktemp("pad")
    return write_gguf(
        "qwen3moe", folder / "q8.gguf", n_layer=4, n_embd=96, n_ff_exp=64, weight_type="q8_0"
    )


def _padding(model_path: Path) -> int:
    model = read_model(str(model_path))
    return sum(
        cuda_alloc_size(t.ggml_type, t.shape, t.n_bytes or 0) - (t.n_bytes or 0)
        for t in model.tensors
        if t.name != "token_embd.weight"
    )


def test_a_card_s_weights_carry_the_padding_a_worker_s_do_not(quantized: Path) -> None:
    model = read_model(str(quantized))
    assert any(t.type_name == "Q8_0" and t.shape[0] % 512 for t in model.tensors)
    request = PlanRequest(ctx=4096, parallel=1)
    card = make_plan(model, "m", synthetic_report(8 * GiB), request)
    worker = RemoteDevice(endpoint="127.0.0.1:50052", name="RPC0", total=8 * GiB, free=8 * GiB)
    rpc = make_plan(
        model, "m", GpuReport(devices=(), source="synthetic"), request, remote=(worker,)
    )
    raw = place_weights(model).on_device()
    assert _padding(quantized) > 0
    assert card.weights_on_device == raw + _padding(quantized)
    assert rpc.weights_on_device == raw  # rpc-server over the CPU backend pads nothing
    assert card.weights.total == rpc.weights.total == model.weights_bytes  # the file's bytes


def test_system_ram_plans_pad_nothing(quantized: Path) -> None:
    model = read_model(str(quantized))
    ram = replace(synthetic_report(8 * GiB), devices=(), cpu=CpuMemory(16 * GiB, 12 * GiB))
    plan = make_plan(model, "m", ram, PlanRequest(ctx=4096))
    assert plan.weights_on_device == model.weights_bytes
