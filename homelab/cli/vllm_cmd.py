"""vLLM through the same commands: ``homelab plan --engine vllm`` and ``homelab serve --engine vllm``.

The model is a folder with config.json and safetensors, or a repo id already in the
HF cache; the plan is priced before booting (vLLM's own check comes four minutes in).
"""

from __future__ import annotations

import argparse
from typing import Any


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    from homelab.engine.kinds import DEFAULT_ENGINE, KINDS

    parser.add_argument(
        "--engine",
        choices=tuple(KINDS),
        default=DEFAULT_ENGINE,
        help="llama.cpp (GGUF, default) or vllm (a model folder / cached repo with config.json)",
    )
    parser.add_argument(
        "--kv-cache-memory",
        metavar="SIZE",
        help="vllm: the KV pool itself (e.g. 2GiB), passed as --kv-cache-memory-bytes; "
        "default: what the card's budget leaves (on a machine without a GPU: from the RAM)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="vllm: start even when the pricing says vLLM will refuse (to see its own refusal)",
    )


def vllm_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The vLLM-only plan options (:func:`~homelab.engine.options.plan_options` values)."""
    from homelab.errors import UsageError
    from homelab.units import parse_size

    text = getattr(args, "kv_cache_memory", None)
    size = None
    if text is not None:
        try:
            size = parse_size(text)
        except (ValueError, OverflowError):
            raise UsageError(
                f"not a size: {text[:24]!r} (try e.g. 2GiB, 512MiB)",
                hint="The KV cache memory setting takes a size with its unit.",
            ) from None
    return {"kv_cache_memory": size, "force": bool(getattr(args, "force", False))}


def vllm_plan_dict(plan, argv: list[str]) -> dict[str, Any]:
    """The vLLM plan for ``--json``: flags, the budget figures (bytes) and the working."""
    from homelab.plan.working import render_steps

    offload = plan.experts_offload
    return {
        "engine": "vllm",
        "model": plan.model_ref,
        "max_model_len": plan.max_model_len,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "kv_cache_dtype": plan.kv_cache_dtype,
        "backend": plan.backend,
        "gpu_memory_utilization": plan.gpu_memory_utilization,
        "kv_cache_memory_bytes": plan.kv_cache_memory_bytes,
        "kv_pool": plan.kv_pool,
        "tokens_fit": plan.tokens_fit,
        "longest_fitting": plan.longest_fitting,
        "n_cpu_moe": offload.n_layers if offload else None,
        "ram": {"experts": offload.bytes} if offload else None,
        "warnings": list(plan.warnings),
        "steps": render_steps(plan.steps),
        "argv": argv,
    }
