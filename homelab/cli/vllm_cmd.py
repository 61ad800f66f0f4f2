"""vLLM through the same commands: ``homelab plan --engine vllm`` and ``homelab serve --engine vllm``.

The model is a folder with config.json and safetensors, or a repo id already in the
HF cache; the plan is priced before booting (vLLM's own check comes four minutes in).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=("llama.cpp", "vllm"),
        default="llama.cpp",
        help="llama.cpp (GGUF, default) or vllm (a model folder / cached repo with config.json)",
    )


def vllm_plan_from_args(args: argparse.Namespace):
    """Price vLLM for the model and card the shared plan options describe."""
    from dataclasses import replace

    from homelab.cli.plan_cmd import options_from_args
    from homelab.plan.card import card_for
    from homelab.plan.vllm.plan import plan_vllm

    options = replace(options_from_args(args), engine="vllm")
    return plan_vllm(args.model, card_for(options), options)


def vllm_argv_for(plan, port: int | None, executable: str = "vllm") -> list[str]:
    from homelab.engine.kinds import engine_kind
    from homelab.engine.vllm.argv import vllm_argv

    return vllm_argv(plan, port=port or engine_kind("vllm").default_port, executable=executable)


def print_vllm_plan(plan, argv: list[str]) -> None:
    import shlex

    from homelab.plan.working import render_steps

    for line in render_steps(plan.steps):
        print(line)
    for warning in plan.warnings:
        print(f"! {warning}")
    print(shlex.join(argv))


def vllm_plan_dict(plan, argv: list[str]) -> dict[str, Any]:
    """The vLLM plan for ``--json``: flags, the budget figures (bytes) and the working."""
    from homelab.plan.working import render_steps

    return {
        "engine": "vllm",
        "model": plan.model_ref,
        "max_model_len": plan.max_model_len,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "kv_cache_dtype": plan.kv_cache_dtype,
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "kv_pool": plan.kv_pool,
        "longest_fitting": plan.longest_fitting,
        "warnings": list(plan.warnings),
        "steps": render_steps(plan.steps),
        "argv": argv,
    }
