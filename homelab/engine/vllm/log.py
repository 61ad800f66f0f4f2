"""Read vLLM's start-up log: why it failed, and the KV pool it allocated.

Pure functions over log text (no I/O). Formats are vLLM 0.33.0's (research
engines.md A1/A2; vllm/v1/worker/gpu_worker.py, vllm/v1/core/kv_cache_utils.py and
kv_cache_planning.py), each line usually prefixed ``(EngineCore_DP0 pid=N) INFO
MM-DD HH:MM:SS [file.py:line]``, so patterns are searched, not anchored. Older
spellings are accepted where they differ (the capacity on two lines, "models's",
the needed GiB without its parenthesis).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from homelab.errors import DoesNotFitError, EngineError, HomelabError, UsageError
from homelab.plan.vllm.refusal import kv_refusal_error

FailureKind = Literal[
    "kv_too_small",
    "no_kv_memory",
    "free_memory",
    "ram_for_kv",
    "weights_oom",
    "batch_below_block",
    "max_len_exceeds_model",
    "unknown_architecture",
    "port_in_use",
    "compile_cache_damaged",
    "engine_init_failed",
]

_NUM = r"([\d,]+)"


def _int(text: str) -> int:
    return int(text.replace(",", ""))


_KV_TOKENS = re.compile(r"(\w[\w +]*?) KV cache size: " + _NUM + r" tokens")

_F_KV = re.compile(
    r"max seq len \("
    + _NUM
    + r"\),?\s*\(?([\d.]+) GiB KV\s+cache is needed, which is larger than the "
    r"available KV\s+cache\s+memory \(([\d.]+) GiB\)"
)
_F_KV_OLD = re.compile(
    r"The model's max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored "
    r"in KV cache \((\d+)\)"
)
_F_ESTIMATE = re.compile(r"estimated maximum model length is " + _NUM, re.IGNORECASE)
_F_NO_KV = re.compile(r"No available memory for the cache blocks|Cannot auto-fit max_model_len")
_F_FREE = re.compile(
    r"Free memory on device (\S+) \(([\d.]+)/([\d.]+) GiB\) on startup is less than desired GPU memory "
    r"utilization \(([\d.]+), ([\d.]+) GiB\)"
)
_F_RAM = re.compile(
    r"Available memory on node (\d+) \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is less than "
    r"requested memory for kv \(([\d.]+)"
)
_F_OOM = re.compile(
    r"Failed to load model - not enough GPU memory|torch\.OutOfMemoryError|CUDA out of memory"
)
_F_BATCH = re.compile(r"block_size \((\d+)\) must be <= max_num_batched_tokens(?: \((\d+)\))?")
_F_MAX_LEN = re.compile(
    r"User-specified max_model_len \((\d+)\) is greater than the derived max_model_len"
)
_F_ARCH = re.compile(r"Model architectures (\[[^\]]*\]) are not supported")
_F_PORT = re.compile(r"Address already in use")
_F_INIT = re.compile(r"Engine core initialization failed")
_F_COMPILE_CACHE = re.compile(
    r"(\S*/torch_compile_cache)/\S*: (?:file too short|invalid ELF header)"
)
"""A compiled kernel in vLLM's torch.compile cache that cannot be loaded: a start stopped while
it was written (seen here: ``InductorError: ImportError: …/torch_compile_cache/…/….main.so:
file too short``, then every later start fails the same way until the cache goes)."""


@dataclass(frozen=True, slots=True)
class VllmFailure:
    """Why vLLM did not start, with the numbers its message carried."""

    kind: FailureKind
    line: str
    """The log line that said so (without its prefix noise trimmed: as printed)."""
    max_model_len: int | None = None
    needed_gib: float | None = None
    available_gib: float | None = None
    estimated_max_model_len: int | None = None
    device: str | None = None
    free_gib: float | None = None
    total_gib: float | None = None
    utilization: float | None = None
    requested_gib: float | None = None
    block_size: int | None = None
    path: str | None = None
    """A folder the message names (the damaged compile cache)."""


def last_kv_tokens(lines: Sequence[str]) -> int | None:
    """The KV pool in tokens from the last capacity line (the latest start in the log)."""
    for line in reversed(lines):
        match = _KV_TOKENS.search(line)
        if match:
            return _int(match.group(2))
    return None


def find_failure(text: str) -> VllmFailure | None:
    """The most specific failure the log reports (the root cause before the generic
    "Engine core initialization failed"), or ``None``."""
    match = _F_KV.search(text)
    if match:
        estimate = _F_ESTIMATE.search(text, match.end())
        return VllmFailure(
            "kv_too_small",
            _line_of(text, match),
            max_model_len=_int(match.group(1)),
            needed_gib=float(match.group(2)),
            available_gib=float(match.group(3)),
            estimated_max_model_len=_int(estimate.group(1)) if estimate else None,
        )
    match = _F_KV_OLD.search(text)
    if match:
        return VllmFailure(
            "kv_too_small",
            _line_of(text, match),
            max_model_len=int(match.group(1)),
            estimated_max_model_len=int(match.group(2)),
        )
    match = _F_FREE.search(text)
    if match:
        return VllmFailure(
            "free_memory",
            _line_of(text, match),
            device=match.group(1),
            free_gib=float(match.group(2)),
            total_gib=float(match.group(3)),
            utilization=float(match.group(4)),
            requested_gib=float(match.group(5)),
        )
    match = _F_RAM.search(text)
    if match:  # the CPU backend: the pool asked for is more than the RAM free
        return VllmFailure(
            "ram_for_kv",
            _line_of(text, match),
            free_gib=float(match.group(2)),
            total_gib=float(match.group(3)),
            requested_gib=float(match.group(4)),
        )
    match = _F_BATCH.search(text)
    if match:
        return VllmFailure(
            "batch_below_block", _line_of(text, match), block_size=int(match.group(1))
        )
    match = _F_MAX_LEN.search(text)
    if match:
        return VllmFailure(
            "max_len_exceeds_model", _line_of(text, match), max_model_len=int(match.group(1))
        )
    match = _F_COMPILE_CACHE.search(text)
    if match:
        return VllmFailure("compile_cache_damaged", _line_of(text, match), path=match.group(1))
    for kind, pattern in (
        ("no_kv_memory", _F_NO_KV),
        ("weights_oom", _F_OOM),
        ("unknown_architecture", _F_ARCH),
        ("port_in_use", _F_PORT),
        ("engine_init_failed", _F_INIT),
    ):
        match = pattern.search(text)
        if match:
            return VllmFailure(kind, _line_of(text, match))  # type: ignore[arg-type]
    return None


def _line_of(text: str, match: re.Match[str]) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start : end if end >= 0 else len(text)].strip()


def failure_error(failure: VllmFailure) -> HomelabError:
    """The failure as a homelab error with a next step (the CLI and TUI show these)."""
    line = f"vLLM said: {failure.line}"
    if failure.kind == "kv_too_small":
        return _kv_too_small_error(failure, line)
    if failure.kind == "free_memory":
        return _free_memory_error(failure, line)
    if failure.kind == "ram_for_kv":
        return DoesNotFitError(
            f"vLLM's CPU backend found {failure.free_gib} of {failure.total_gib} GiB of RAM free for a "
            f"{failure.requested_gib} GiB KV pool. {line}",
            hint="Use a smaller KV cache memory setting, or close programs that hold RAM.",
        )
    if failure.kind == "batch_below_block":
        return UsageError(
            f"vLLM refuses a --max-num-batched-tokens below this hybrid model's {failure.block_size}-token "
            f"block while prefix caching is on. {line}",
            hint=f"Use --max-num-batched-tokens {failure.block_size} or more.",
        )
    if failure.kind == "max_len_exceeds_model":
        return UsageError(
            f"--max-model-len is beyond what the model's config allows. {line}",
            hint="Use the length its config.json allows, or less.",
        )
    if failure.kind == "compile_cache_damaged":
        return EngineError(
            f"vLLM's torch.compile cache holds a damaged kernel (a start was stopped while "
            f"writing it), so every start fails loading it. {line}",
            hint=f"Delete {failure.path} (vLLM compiles it again at the next start) and "
            "serve again.",
        )
    cls, what, hint = _PLAIN[failure.kind]
    return cls(f"{what}. {line}", hint=hint)


def _kv_too_small_error(failure: VllmFailure, line: str) -> HomelabError:
    """One request's KV cache is more than the pool: the planner's refusal when vLLM gave
    the numbers, else what the (older) line said."""
    if failure.needed_gib is not None:
        assert failure.max_model_len is not None and failure.available_gib is not None
        return kv_refusal_error(
            failure.max_model_len,
            f"{failure.needed_gib}",
            f"{failure.available_gib}",
            failure.estimated_max_model_len,
        )
    est = failure.estimated_max_model_len
    left = f"the {failure.available_gib} GiB" if failure.available_gib is not None else "what is"
    return DoesNotFitError(
        f"vLLM loaded the model, then found that one request of {failure.max_model_len:,} tokens needs "
        f"more KV cache, more than {left} left for it. {line}",
        hint=f"Start with --max-model-len {est}."
        if est
        else "Use a smaller --max-model-len or a smaller model.",
    )


def _free_memory_error(failure: VllmFailure, line: str) -> HomelabError:
    """Less GPU memory free than ``--gpu-memory-utilization`` asks for: the fraction that fits."""
    assert failure.free_gib is not None and failure.total_gib is not None
    room = max(failure.free_gib - 0.5, 0.0)
    suggest = math.floor(room / failure.total_gib * 1000) / 1000
    return DoesNotFitError(
        f"vLLM refused to start: {failure.free_gib} of {failure.total_gib} GiB were free on {failure.device}, "
        f"and --gpu-memory-utilization {failure.utilization} asks for {failure.requested_gib} GiB. {line}",
        hint=f"Use --gpu-memory-utilization {suggest:.3f} (0.5 GiB kept for the desktop), "
        "or close what holds GPU memory and plan again.",
    )


_PLAIN: dict[str, tuple[type[HomelabError], str, str]] = {
    "no_kv_memory": (
        DoesNotFitError,
        "vLLM has no memory left for the KV cache after the weights and scratch",
        "Use a quantized model, or a smaller --max-num-batched-tokens.",
    ),
    "weights_oom": (
        DoesNotFitError,
        "vLLM ran out of GPU memory while loading the weights",
        "Use a quantized checkpoint, or free GPU memory and plan again.",
    ),
    "unknown_architecture": (
        EngineError,
        "this vLLM does not support the model's architecture",
        "Upgrade vLLM, or run the model's GGUF with llama.cpp.",
    ),
    "port_in_use": (
        EngineError,
        "vLLM could not bind its port: another program holds it",
        "Choose another --port.",
    ),
    "engine_init_failed": (
        EngineError,
        "vLLM's engine failed to start",
        "Read the log lines above it for the cause.",
    ),
}
"""(error, what happened, next step) of the failures whose message carries no numbers."""
