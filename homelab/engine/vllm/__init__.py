"""vLLM as homelab's second engine: price the plan before booting, build the argv, read the log.

vLLM spends ``--gpu-memory-utilization`` × the card in a fixed order (weights,
activation scratch, CUDA graphs, then the KV cache) and only finds out whether the
asked-for context fits minutes into its boot. This package does that arithmetic
first, from the model's config.json and weight sizes and the card's NVML figures:

- :func:`vllm_plan` — the plan, with its working (``VllmPlan.steps``);
- :func:`vllm_argv` — ``vllm serve`` with every flag explicit;
- :func:`parse_vllm_log`, :func:`is_ready`, :func:`failure_error` — the start-up log.
"""

from homelab.engine.vllm.argv import vllm_argv
from homelab.engine.vllm.config import ModelConfig, load_model_config
from homelab.engine.vllm.log import (
    VllmFailure,
    VllmStartup,
    failure_error,
    is_ready,
    parse_vllm_log,
)
from homelab.engine.vllm.plan import VllmPlan, vllm_plan

__all__ = [
    "ModelConfig",
    "VllmFailure",
    "VllmPlan",
    "VllmStartup",
    "failure_error",
    "is_ready",
    "load_model_config",
    "parse_vllm_log",
    "vllm_argv",
    "vllm_plan",
]
