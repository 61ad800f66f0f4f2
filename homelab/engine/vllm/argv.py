"""vLLM's command line from a plan: an argv list, never a shell string.

``vllm serve MODEL ...`` where the ``vllm`` script works, else the same server as
``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL ...`` (the CPU build's
script is broken; :mod:`homelab.engine.vllm.locate` decides). A plan with an explicit
KV pool (the CPU backend always, either backend on request) passes it as
``--kv-cache-memory-bytes`` and no ``--gpu-memory-utilization``: vLLM then skips its
memory profiling and the pool is exactly what was priced.

``--enable-prefix-caching`` is always passed: vLLM releases before 0.28 left it off
for hybrid models (Qwen3-Next, Qwen3.5) without a word in the log, and every agent
turn then re-read its whole prompt. The model argument is the folder that was
priced, so vLLM loads exactly those files and never reaches for the network; a
model from the HF cache keeps its repo id as the served name.
"""

from __future__ import annotations

from homelab.engine.llamacpp.served_id import clean_id
from homelab.engine.vllm.kind import Vllm
from homelab.engine.vllm.locate import launch_prefix
from homelab.errors import UsageError
from homelab.plan.vllm.offload import EXPERTS_SEGMENT
from homelab.plan.vllm.plan import VllmPlan

DEFAULT_HOST = "127.0.0.1"


def vllm_argv(
    plan: VllmPlan,
    *,
    host: str = DEFAULT_HOST,
    port: int = Vllm.default_port,
    executable: str = "vllm",
    served: str | None = None,
) -> list[str]:
    """The flags the plan derived, in the order a person would write them.

    ``--served-model-name`` is the same clean id llama.cpp's ``--alias`` is
    (:func:`~homelab.engine.llamacpp.served_id.clean_id`): ``served`` (a preset's key)
    when given, else the plan's name (the repo id, ``Qwen/Qwen3-8B`` → ``Qwen3-8B``; a local
    folder's own name), so
    ``/v1/models`` and every agent hand-off agree on one id whatever the engine.

    Raises:
        UsageError: a port outside 1–65535 or an empty host.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise UsageError(f"--port must be between 1 and 65535, not {port!r}")
    if not host:
        raise UsageError("--host must not be empty")
    argv = [
        *launch_prefix(executable, plan.model_ref),
        "--max-model-len",
        str(plan.max_model_len),
        "--max-num-seqs",
        str(plan.max_num_seqs),
    ]
    if plan.kv_cache_memory_bytes is not None:
        argv += ["--kv-cache-memory-bytes", str(plan.kv_cache_memory_bytes)]
    else:
        argv += ["--gpu-memory-utilization", f"{plan.gpu_memory_utilization:.3f}"]
    argv += [
        "--kv-cache-dtype",
        plan.kv_cache_dtype,
        "--max-num-batched-tokens",
        str(plan.max_num_batched_tokens),
        "--enable-prefix-caching",
    ]
    if plan.tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(plan.tensor_parallel_size)]
    if plan.experts_offload is not None:  # the routed experts of the first N layers in RAM
        argv += ["--cpu-offload-gb", plan.experts_offload.gb_flag]
        argv += ["--cpu-offload-params", EXPERTS_SEGMENT]
    name = clean_id(served) if served is not None else ""
    if not name and plan.served_model_name:
        name = clean_id(plan.served_model_name)
    if not name:  # a local folder: its name, never its path (vLLM's default)
        name = clean_id(str(plan.model_ref))
    if name:
        argv += ["--served-model-name", name]
    argv += ["--host", host, "--port", str(port)]
    return argv
