"""The working of a split: each device's own arithmetic, in llama-server's device order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from homelab.plan.working import Step, byte_figure

if TYPE_CHECKING:
    from homelab.plan.budget import DeviceBudget
    from homelab.plan.planner import Plan
    from homelab.plan.split import DeviceShare


def budget_terms(b: DeviceBudget, headroom_why: str, usable: str, level: int) -> list[Step]:
    """What comes off the device's total before llama-server, and what is left to it."""
    terms = (
        ("reserved by the driver", b.reserved),
        ("desktop (its peak while sampled)", b.desktop),
        ("other processes", b.other),
        (f"headroom ({headroom_why})", b.headroom),
    )
    rows = [Step(label, byte_figure(v), v, level=level, sign="−") for label, v in terms]
    return [*rows, Step(usable, byte_figure(b.usable), b.usable, level=level, sign="=")]


def _held(share: DeviceShare) -> str:
    blocks = share.block_range + (f" ({share.n_blocks})" if share.n_blocks > 1 else "")
    output = " + the output layer" if share.output else ""
    return f"{blocks}{output}: --tensor-split entry {share.layers}"


def device_lines(plan: Plan) -> list[Step]:
    """Per device: its budget, the layers it holds, what they cost and what is left."""
    n = len(plan.devices)
    order = ",".join(s.device.llama_name for s in plan.devices)
    rows = [
        Step(
            f"Split over {n} device(s) (--split-mode layer, --device {order})",
            "layers in proportion to each device's room after its fixed costs; "
            "the last device holds the output layer",
            n,
        )
    ]
    for share in plan.devices:
        d, b, e = share.device, share.device.budget, share.engine
        role = " (main: output layer and logits)" if share.output else ""
        host = f", on {d.endpoint}" if d.endpoint else ""
        rows.append(
            Step(
                f"{d.llama_name}{role}",
                f"{b.name}{host}, {byte_figure(b.total)} in all",
                b.total,
                level=1,
            )
        )
        why = "drives a display" if b.display_active else "no display"
        rows += budget_terms(b, why, "usable", level=2)
        rows.append(Step("holds", _held(share), share.layers, level=2))
        for label, value in (
            ("weights", share.weights),
            ("KV of its layers", share.kv),
            ("CUDA context and cuBLAS", e.cuda_context),
            ("compute buffer (estimated)", e.compute_buffer),
        ):
            if value:
                rows.append(Step(label, byte_figure(value), value, level=2, sign="−"))
        rows.append(Step("spare", byte_figure(share.spare), share.spare, level=2, sign="="))
    return rows
