"""Routed experts in system RAM for real: a ``homelab worker`` on 127.0.0.1 is the card, the real
llama-server serves a generated MoE model with ``--n-cpu-moe N``, and its load log agrees with
the plan byte for byte (to the log's two decimals of MiB): the worker's model buffer is the
plan's weights on the device, the ``CPU_Mapped`` buffer is the plan's mapped RAM, the KV cache
sits on the worker; and the engine answers a completion."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.llamacpp.log import LoadLog, parse_load_log
from homelab.engine.options import plan_options
from homelab.gpu.cpu import cpu_flags
from homelab.plan.cpu_repack import engine_features
from homelab.plan.placement import plan_ram
from tests.factory import write_gguf
from tests.factory.mib import mib_matches
from tests.factory.server_log import free_port
from tests.rpc.conftest import serve_and_ask
from tests.rpc.moe_checks import assert_served_as_planned

pytestmark = pytest.mark.engine

GEOMETRIES = {
    # experts big enough that the moved bytes show in the log's 0.01 MiB
    "qwen3moe": {"n_layer": 8, "n_expert": 8, "n_ff_exp": 512},
    # shared experts (and their gate) stay on the card beside the routed ones
    "qwen2moe": {"n_layer": 6, "n_expert": 8, "n_ff_exp": 256},
}


@pytest.mark.parametrize(("arch", "n_cpu_moe"), [("qwen3moe", 2), ("qwen3moe", 6), ("qwen2moe", 3)])
def test_experts_of_the_first_n_blocks_are_where_the_plan_says(
    start_worker, engines, tmp_path: Path, arch: str, n_cpu_moe: int
) -> None:
    model = write_gguf(arch, tmp_path / f"{arch}.gguf", **GEOMETRIES[arch])
    worker = start_worker()
    options = plan_options(
        ctx=512, slots=1, port=free_port(), rpc=(worker.endpoint,), n_cpu_moe=n_cpu_moe
    )
    served = serve_and_ask(
        str(model), options, engines, "/completion", {"prompt": "Hello", "n_predict": 4}
    )

    assert_served_as_planned(served, worker.endpoint)
    assert served.argv[served.argv.index("--n-cpu-moe") + 1] == str(n_cpu_moe)
    ram = plan_ram(served.plan)
    assert ram is not None and ram.n_cpu_moe == n_cpu_moe and ram.experts > 0


def _model_mib(log: LoadLog, device: str) -> list[float]:
    return [b.mib for b in log.buffers if b.kind == "model" and b.device == device]


@pytest.mark.parametrize("weight_type", ["q4_0", "q4_k", "q8_0"])
def test_the_ram_side_is_what_the_cpu_backend_holds(
    start_worker, engines, tmp_path: Path, weight_type: str
) -> None:
    """Q4_0 experts (and Q4_K down experts, between F16 gate/up ones) are repacked on an AVX2
    CPU (their own ``CPU_REPACK`` buffer, out of the mapped span); Q8_0 ones are not on x86
    (all mapped): the plan's RAM side is the log's."""
    model = write_gguf(
        "qwen3moe",
        tmp_path / f"{weight_type}.gguf",
        weight_type=weight_type,
        **GEOMETRIES["qwen3moe"],
    )
    worker = start_worker()
    options = plan_options(ctx=512, slots=1, port=free_port(), rpc=(worker.endpoint,), n_cpu_moe=3)
    served = serve_and_ask(
        str(model), options, engines, "/completion", {"prompt": "Hello", "n_predict": 4}
    )
    plan, reply = served.plan, served.reply
    log = parse_load_log("\n".join(served.lines))
    assert reply.status_code == 200, reply.text
    check = plan.ram
    assert check is not None and check.side.repack is not None and check.fits
    features = engine_features(cpu_flags())
    if weight_type != "q8_0" and features is not None and "avx2" in features:
        assert check.side.repack > 0
    (share,) = plan.devices
    device = [b.mib for b in log.buffers if b.kind == "model" and b.worker == worker.endpoint]
    assert len(device) == 1 and mib_matches(share.weights, device[0]), (share.weights, device)
    (mapped,) = _model_mib(log, "CPU_Mapped")
    assert mib_matches(check.side.mapped, mapped), (check.side, mapped)
    repack = _model_mib(log, "CPU_REPACK")
    if check.side.repack:
        assert len(repack) == 1 and mib_matches(check.side.repack, repack[0]), (check.side, repack)
    else:
        assert repack == [], repack
    compute = [b.mib for b in log.buffers if b.kind == "compute" and b.device == "CPU"]
    assert len(compute) == 1, compute
    # the compute buffer is an estimate (the experts' gate/up/GLU products of one micro-batch
    # dominate it: 6.25 MiB here; the log adds the graph's inputs, its KQ mask among them)
    assert abs(compute[0] * 2**20 - check.side.compute) <= 2**20, (compute, check.side)
