"""Routed experts in system RAM for real: a ``homelab worker`` on 127.0.0.1 is the card, the real
llama-server serves a generated MoE model with ``--n-cpu-moe N``, and its load log agrees with
the plan byte for byte (to the log's two decimals of MiB): the worker's model buffer is the
plan's weights on the device, the ``CPU_Mapped`` buffer is the plan's mapped RAM, the KV cache
sits on the worker; and the engine answers a completion."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.engine.options import plan_options
from homelab.plan.placement import plan_ram
from tests.factory import write_gguf
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
