"""The offload ladder for real on two more MoE geometries: a ``homelab worker`` on 127.0.0.1 is
the card, the real llama-server serves a generated model as homelab planned it, and its load
log agrees with the plan byte for byte (to the log's two decimals of MiB), on every rung.

- gpt-oss-like: attention sinks, sliding-window attention every other layer (two KV caches),
  biased routed experts (``ffn_*_exps.bias`` move to RAM with their experts) and router;
- deepseek2-like: MLA (one 576-wide K row per token, V a view of it), a leading dense block
  (no experts: ``--n-cpu-moe 1`` moves nothing), shared experts (``_shexp``, stay on the card).

The worker reports the host's free memory; the rungs that need a small card are planned on
its answer replayed with less free memory (:func:`~tests.rpc.conftest.prepared_on`), sized
from the plan's own needs at a given setting: the engine then runs the plan's argv as
``homelab serve`` would (the worker itself has room for anything, so where each tensor goes
is what the argv says, not what fits).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from homelab.engine.llamacpp.rpc_query import query_workers
from homelab.engine.options import plan_options
from homelab.plan.budget import HEADROOM_HEADLESS
from homelab.plan.placement import EVERY_BLOCK, plan_ram
from tests.factory import write_gguf
from tests.factory.server_log import free_port
from tests.rpc.conftest import prepared_on, serve_and_ask
from tests.rpc.moe_checks import assert_served_as_planned

pytestmark = pytest.mark.engine

GEOMETRIES = {
    # 8 layers (4 SWA, 4 full); experts big enough that one block's show in the log's 0.01 MiB
    "gpt-oss": {"n_layer": 8, "n_expert": 8, "n_ff_exp": 512},
    # 27 layers (llama.cpp's "lite" DeepSeek-V2 path), block 0 dense
    "deepseek2": {"n_expert": 8, "n_ff_exp": 256},
}
ASK = ("/completion", {"prompt": "Hello", "n_predict": 4})


def _model(arch: str, tmp_path: Path) -> str:
    return str(write_gguf(arch, tmp_path / f"{arch}.gguf", **GEOMETRIES[arch]))


def _options(endpoint: str, n_cpu_moe: int | None = None):
    return plan_options(ctx=512, slots=1, port=free_port(), rpc=(endpoint,), n_cpu_moe=n_cpu_moe)


@pytest.mark.parametrize(
    ("arch", "n_cpu_moe"), [("gpt-oss", 3), ("gpt-oss", 50), ("deepseek2", 1), ("deepseek2", 4)]
)
def test_experts_in_ram_as_asked(start_worker, engines, tmp_path: Path, arch, n_cpu_moe) -> None:
    """As given by the person; 50 blocks of 8 are every block (llama.cpp's overrides for
    blocks that do not exist match nothing), and the plan says so."""
    model, worker = _model(arch, tmp_path), start_worker()
    served = serve_and_ask(model, _options(worker.endpoint, n_cpu_moe), engines, *ASK)

    assert_served_as_planned(served, worker.endpoint)
    ram = plan_ram(served.plan)
    n_blocks = len(served.plan.weights.per_block)
    assert ram is not None and ram.n_cpu_moe == min(n_cpu_moe, n_blocks)
    if n_cpu_moe > n_blocks:
        assert any(f"the model has {n_blocks}" in w for w in served.plan.warnings)
    if arch == "deepseek2" and n_cpu_moe == 1:  # its block 0 is dense: no experts to move
        assert ram.experts == 0
    else:
        assert ram.experts > 0
    assert served.plan.n_gpu_layers is None


@pytest.mark.parametrize(("arch", "n_cpu_moe"), [("gpt-oss", 6), ("deepseek2", 12)])
def test_whole_layers_off_the_card_with_experts_in_ram(
    start_worker, engines, tmp_path: Path, arch, n_cpu_moe
) -> None:
    """``-ngl K`` and ``--n-cpu-moe N`` together: a card too small for every block even
    with the experts of the first N in RAM; N reaches past the blocks left on the CPU."""
    model, worker = _model(arch, tmp_path), start_worker()
    options = _options(worker.endpoint, n_cpu_moe)
    (answer,) = query_workers(options.card.rpc)
    roomy = prepared_on(model, options, (answer,)).plan.plan
    (share,) = roomy.devices
    full_block = roomy.weights.per_block[-1]
    small = HEADROOM_HEADLESS + share.used - 2 * full_block - full_block // 2
    prepared = prepared_on(model, options, (replace(answer, free=small),))
    served = serve_and_ask(model, options, engines, *ASK, prepared=prepared)

    plan = served.plan
    n_blocks = len(plan.weights.per_block)
    assert plan.verdict == "partial" and plan.n_gpu_layers is not None
    on_cpu = n_blocks - (plan.n_gpu_layers - 1)
    assert 0 < on_cpu < n_cpu_moe, (on_cpu, n_cpu_moe)
    ram = plan_ram(plan)
    assert ram is not None and ram.experts > 0  # experts of card blocks below N are in RAM too
    assert_served_as_planned(served, worker.endpoint)


@pytest.mark.parametrize("arch", ["gpt-oss", "deepseek2"])
def test_the_ladder_picks_the_fewest_blocks_whose_experts_make_room(
    start_worker, engines, tmp_path: Path, arch
) -> None:
    """No experts setting and a card that holds every layer's attention and the KV only with
    the experts of some blocks in RAM: the ladder picks that N (rung 2), the engine runs it."""
    model, worker = _model(arch, tmp_path), start_worker()
    target = 3
    (answer,) = query_workers((worker.endpoint,))
    sized = prepared_on(model, _options(worker.endpoint, target), (answer,)).plan.plan
    (share,) = sized.devices
    # room for the plan at N = target, and half a block's experts more: not enough for N - 1
    small = HEADROOM_HEADLESS + share.used + sized.weights.experts_per_block[-1] // 2
    options = _options(worker.endpoint)
    prepared = prepared_on(model, options, (replace(answer, free=small),))
    served = serve_and_ask(model, options, engines, *ASK, prepared=prepared)

    plan = served.plan
    assert plan.weights.n_cpu_moe == target, plan.warnings
    assert plan.verdict == "fits" and plan.n_gpu_layers is None
    assert f"experts of {target} layers in RAM" in plan.rung
    assert_served_as_planned(served, worker.endpoint)


@pytest.mark.parametrize("arch", ["gpt-oss", "deepseek2"])
def test_the_ladder_moves_whole_layers_when_no_n_is_enough(
    start_worker, engines, tmp_path: Path, arch
) -> None:
    """A card too small for every block even with every block's experts in RAM: rung 3,
    whole layers off the card (``-ngl K``), no experts setting, as before the ladder."""
    model, worker = _model(arch, tmp_path), start_worker()
    (answer,) = query_workers((worker.endpoint,))
    sized = prepared_on(model, _options(worker.endpoint, EVERY_BLOCK), (answer,)).plan.plan
    (share,) = sized.devices
    full_block = sized.weights.per_block[-1]
    small = HEADROOM_HEADLESS + share.used - 2 * full_block
    options = _options(worker.endpoint)
    prepared = prepared_on(model, options, (replace(answer, free=small),))
    served = serve_and_ask(model, options, engines, *ASK, prepared=prepared)

    plan = served.plan
    assert plan.weights.n_cpu_moe == 0 and not plan.rung
    assert plan.verdict == "partial" and plan.n_gpu_layers is not None
    assert_served_as_planned(served, worker.endpoint)
