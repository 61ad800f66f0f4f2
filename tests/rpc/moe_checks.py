"""What a served MoE plan must look like in the real engine's load log, for every rung.

One worker on 127.0.0.1 is the card. The worker's model buffer is the plan's weights on the
device; the ``CPU_Mapped`` buffer is the plan's mapped RAM side (the input embedding, the
routed experts kept in RAM, whole blocks left on the CPU); the KV cache of the device's
layers sits on the worker, that of the blocks left on the CPU (``-ngl K``) in RAM; and the
engine answered.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from homelab.engine.llamacpp.log import parse_load_log
from homelab.plan.kv import kv_allocation
from homelab.plan.placement import plan_ram, ram_share
from tests.factory.mib import mib_matches, mibs_match


def flag(argv: list[str], name: str) -> str | None:
    """The value after ``name`` in ``argv``; None when it is not there."""
    return argv[argv.index(name) + 1] if name in argv else None


def assert_served_as_planned(served: Any, endpoint: str) -> None:
    """The engine answered, and its logged buffers are the plan's bytes (to the log's MiB):
    a plan served with the worker at ``endpoint`` as its one device."""
    plan, argv = served.plan, served.argv
    assert served.reply.status_code == 200, served.reply.text
    assert "content" in served.reply.json()
    log = parse_load_log("\n".join(served.lines))

    n_cpu_moe = plan.weights.n_cpu_moe
    assert flag(argv, "--n-cpu-moe") == (str(n_cpu_moe) if n_cpu_moe else None), argv
    ngl = "all" if plan.n_gpu_layers is None else str(plan.n_gpu_layers)
    assert flag(argv, "-ngl") == ngl, argv

    (share,) = plan.devices
    assert share.device.endpoint == endpoint
    device = [b.mib for b in log.buffers if b.kind == "model" and b.worker == endpoint]
    assert len(device) == 1 and mib_matches(share.weights, device[0]), (share.weights, device)
    assert share.weights == plan.weights_on_device

    # the RAM side: the input embedding, the blocks below the card's first, the experts of
    # the first N blocks (the plan's own figure when it keeps experts there)
    ram = ram_share(plan.weights, share.first_block)
    assert plan_ram(plan) in (None, ram) and (plan_ram(plan) is None) == (not n_cpu_moe)
    mapped = [b.mib for b in log.buffers if b.kind == "model" and b.device == "CPU_Mapped"]
    assert len(mapped) == 1 and mib_matches(ram.mapped, mapped[0]), (ram, mapped)
    others = [
        b
        for b in log.buffers
        if b.kind == "model" and b.worker != endpoint and b.device != "CPU_Mapped"
    ]
    assert not others, f"model buffers the plan does not know of: {others}"

    kv = [b for b in log.buffers if b.kind == "KV"]
    on_device = [b.mib for b in kv if b.worker == endpoint]
    in_ram = [b.mib for b in kv if b.worker != endpoint]
    assert mibs_match(share.kv, on_device), (share.kv, kv)
    n_ctx = plan.candidate.allocation.n_ctx
    whole = kv_allocation(plan.geometry, replace(plan.settings, n_ctx=n_ctx)).total
    if plan.n_gpu_layers is None:  # every layer's KV on the card, none in RAM
        assert not in_ram and whole == share.kv, kv
    else:  # the blocks left on the CPU keep their KV in RAM
        assert all(b.device == "CPU" for b in kv if b.worker != endpoint), kv
        assert whole > share.kv and mibs_match(whole - share.kv, in_ram), (whole, share.kv, kv)
