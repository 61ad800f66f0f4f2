"""llama-server's command line from a plan: an argv list, never a shell string."""

from __future__ import annotations

from homelab.plan.planner import Plan
from homelab.units import MiB

DEFAULT_PORT = 8080


def fit_target_mib(plan: Plan) -> int:
    """``--fit-target``: our headroom, so llama.cpp's own fitter is only a safety net."""
    return max(1, plan.budget.headroom // MiB)


def llama_server_argv(
    plan: Plan,
    *,
    server: str = "llama-server",
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    model_args: list[str] | None = None,
) -> list[str]:
    """The flags the plan derived, in the order a person would write them.

    ``model_args`` replaces ``-m PATH`` (e.g. ``-hf REPO:QUANT`` for a model not yet downloaded).
    """
    s = plan.settings
    argv = [server, *(model_args or ["-m", plan.model_path])]
    argv += ["-c", str(plan.candidate.allocation.n_ctx), "-np", str(s.n_seq)]
    if s.unified:
        argv.append("-kvu")
    argv += ["-ctk", s.type_k, "-ctv", s.type_v, "-fa", "on" if s.flash_attn else "off"]
    if plan.on_gpu:
        argv += ["-ngl", "all" if plan.n_gpu_layers is None else str(plan.n_gpu_layers)]
        argv += ["--fit-target", str(fit_target_mib(plan))]
    else:
        argv += ["-ngl", "0"]
    if s.n_ubatch != 512:
        argv += ["-ub", str(s.n_ubatch)]
    if s.n_batch != 2048:
        argv += ["-b", str(s.n_batch)]
    argv += ["--host", host, "--port", str(port), "--metrics", "-lv", "4"]
    return argv
