"""``vllm serve``'s command line from a plan: an argv list, never a shell string.

``--enable-prefix-caching`` is always passed: vLLM releases before 0.28 left it off
for hybrid models (Qwen3-Next, Qwen3.5) without a word in the log, and every agent
turn then re-read its whole prompt. The model argument is the folder that was
priced, so vLLM loads exactly those files and never reaches for the network; a
model from the HF cache keeps its repo id as the served name.
"""

from __future__ import annotations

from homelab.errors import UsageError
from homelab.plan.vllm.plan import VllmPlan

DEFAULT_PORT = 8000
DEFAULT_HOST = "127.0.0.1"


def vllm_argv(
    plan: VllmPlan,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    executable: str = "vllm",
) -> list[str]:
    """The flags the plan derived, in the order a person would write them.

    Raises:
        UsageError: a port outside 1–65535 or an empty host.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, not {port!r}")
    if not host:
        raise UsageError("--host must not be empty")
    argv = [
        executable,
        "serve",
        plan.model_ref,
        "--max-model-len",
        str(plan.max_model_len),
        "--max-num-seqs",
        str(plan.max_num_seqs),
        "--gpu-memory-utilization",
        f"{plan.gpu_memory_utilization:.3f}",
        "--kv-cache-dtype",
        plan.kv_cache_dtype,
        "--max-num-batched-tokens",
        str(plan.max_num_batched_tokens),
        "--enable-prefix-caching",
    ]
    if plan.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(plan.tensor_parallel_size)]
    if plan.served_model_name:
        argv += ["--served-model-name", plan.served_model_name]
    argv += ["--host", host, "--port", str(port)]
    return argv
