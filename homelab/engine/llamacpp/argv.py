"""llama-server's command line from a plan: an argv list, never a shell string."""

from __future__ import annotations

from homelab.engine.llamacpp.backend import gpu_device
from homelab.engine.llamacpp.kind import LlamaCpp
from homelab.plan.planner import Plan
from homelab.units import MiB


def fit_target_mib(plan: Plan) -> int:
    """``--fit-target``: our headroom, so llama.cpp's own fitter is only a safety net."""
    return max(1, plan.budget.headroom // MiB)


def fit_target(plan: Plan) -> str:
    """``--fit-target``'s value: the headroom, per device (in ``--device`` order) for a split."""
    if not plan.split:
        return str(fit_target_mib(plan))
    return ",".join(str(max(1, d.device.budget.headroom // MiB)) for d in plan.devices)


def device_args(plan: Plan, visible: frozenset[str] | None = None) -> list[str]:
    """Which devices llama-server uses, and how the layers are split over them.

    One card: ``--device CUDAn`` pins it, so llama-server does not spread onto the others
    (a synthetic ``--vram`` card is no card in particular, and an engine whose ``visible``
    devices lack it, a CPU build, cannot be pinned: nothing is pinned then).
    A split: ``--rpc`` registers the workers (before ``--device`` names their devices),
    ``--device`` lists every device in the plan's order (the output layer goes to the
    last), ``--split-mode layer`` and ``--tensor-split`` give each device its exact count
    of layers, ``-mg`` names the main card (llama.cpp reads it only for split modes none
    and row; in layer mode the device order places the output layer).
    """
    if not plan.on_gpu or not plan.devices:
        return []
    if not plan.split:
        device = plan.devices[0].device
        seen = visible is None or device.llama_name in visible
        return ["--device", device.llama_name] if device.pin and seen else []
    args = []
    endpoints = list(dict.fromkeys(d.device.endpoint for d in plan.devices if d.device.remote))
    if endpoints:
        args += ["--rpc", ",".join(e for e in endpoints if e is not None)]
    args += ["--device", ",".join(d.device.llama_name for d in plan.devices)]
    args += [
        "--split-mode",
        "layer",
        "--tensor-split",
        ",".join(str(d.layers) for d in plan.devices),
    ]
    args += ["-mg", str(len(plan.devices) - 1)]
    return args


def llama_server_argv(
    plan: Plan,
    *,
    server: str = "llama-server",
    host: str = "127.0.0.1",
    port: int = LlamaCpp.default_port,
    model_args: list[str] | None = None,
    visible: frozenset[str] | None = None,
    cache_ram_mib: int | None = None,
    alias: str | None = None,
) -> list[str]:
    """The flags the plan derived, in the order a person would write them.

    ``cache_ram_mib``: ``--cache-ram`` (:mod:`homelab.plan.cache_ram`); None: not passed.
    ``alias``: ``--alias``, the model id ``/v1/models`` reports
    (:mod:`homelab.engine.llamacpp.served_id`); None: llama-server names it by its path.

    ``model_args`` replaces ``-m PATH`` (e.g. ``-hf REPO:QUANT`` for a model not yet downloaded).
    ``visible``: the devices the engine binary lists (see ``visible_devices``); None: unknown.
    A plan for system RAM on a binary that lists a GPU says ``--device none``: ``-ngl 0``
    alone still lets llama.cpp offload large matrix products to the card.
    """
    s = plan.settings
    argv = [server, *(model_args or ["-m", plan.model_path])]
    if alias is not None:
        argv += ["--alias", alias]
    argv += ["-c", str(plan.candidate.allocation.n_ctx), "-np", str(s.n_seq)]
    if s.unified:
        argv.append("-kvu")
    argv += ["-ctk", s.type_k, "-ctv", s.type_v, "-fa", "on" if s.flash_attn else "off"]
    if plan.on_gpu:
        argv += ["-ngl", "all" if plan.n_gpu_layers is None else str(plan.n_gpu_layers)]
        argv += device_args(plan, visible)
        if plan.weights.n_cpu_moe:  # the routed experts of the first N blocks stay in RAM
            argv += ["--n-cpu-moe", str(plan.weights.n_cpu_moe)]
        argv += ["--fit-target", fit_target(plan)]
    else:
        argv += ["-ngl", "0"]
        if visible is not None and any(gpu_device(name) for name in visible):
            argv += ["--device", "none"]  # a plan for RAM: no compute offloaded to a card either
    if s.n_ubatch != 512:
        argv += ["-ub", str(s.n_ubatch)]
    if s.n_batch != 2048:
        argv += ["-b", str(s.n_batch)]
    if cache_ram_mib is not None:
        argv += ["--cache-ram", str(cache_ram_mib)]
    argv += ["--host", host, "--port", str(port), "--metrics", "-lv", "4"]
    return argv
