"""Did llama-server run out of memory? Its log lines (b11312) and its failure, read for that.

The load-log parser (:mod:`homelab.engine.llamacpp.log`) already knows the allocation
lines ("failed to allocate CPU buffer of size N", "unable to allocate CUDA0 buffer",
"out of memory", "insufficient memory"); this module adds the ones a run prints when an
allocation fails later (a C++ ``std::bad_alloc`` thrown out of a request, a CUDA error
naming out-of-memory, Vulkan's ``ErrorOutOfDeviceMemory``) and answers one question for
the heal: was *this* failure, or *this* line, an out-of-memory. Captured in a real run
under an address-space cap (``RLIMIT_AS``), a load that cannot allocate its KV says::

    E ggml_aligned_malloc: insufficient memory (attempted to allocate 3060.00 MB)
    E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 3208642560
    E alloc_tensor_range: failed to allocate CPU buffer of size 3208642560
    E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache

and a ready engine whose CPU graph work buffer (allocated lazily, on the first big batch)
cannot grow answers that request with HTTP 500 and logs::

    E srv  update_slots: decode() failed: std::bad_alloc

One allocation failure is *not* a reason to restart: the host-RAM prompt cache
(``--cache-ram``) that cannot copy a slot's state logs
``failed to allocate memory for prompt cache state: std::bad_alloc``, shrinks its limit
and the engine serves on without it (:func:`prompt_cache_line`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from homelab.engine.llamacpp.log import FailureKind, parse_failure_line
from homelab.engine.supervision.failure import EngineFailure

_MORE = re.compile(
    r"std::bad_alloc|cudaMalloc(?:Async|Host)? failed|CUDA error: out of memory"
    r"|cudaErrorMemoryAllocation|ErrorOutOfDeviceMemory|failed to allocate memory"
)
_PROMPT_CACHE = re.compile(r"failed to allocate memory for prompt cache state")


def oom_line(line: str) -> bool:
    """True when ``line`` says an allocation failed."""
    found = parse_failure_line(line)
    if found is not None and found.kind is FailureKind.OUT_OF_MEMORY:
        return True
    return _MORE.search(line) is not None


def prompt_cache_line(line: str) -> bool:
    """True when ``line`` says the prompt cache could not allocate a slot's state (the
    engine drops the cache and serves on: no heal)."""
    return _PROMPT_CACHE.search(line) is not None


def heal_line(line: str) -> bool:
    """True when ``line`` says an allocation failed that costs the engine its work (a load
    buffer, a batch's ``decode()``, a CUDA allocation), not only its prompt cache."""
    return oom_line(line) and not prompt_cache_line(line)


def oom_lines(lines: Iterable[str]) -> list[str]:
    """The lines of ``lines`` that say an allocation failed that costs the engine its work
    (:func:`heal_line`), in order."""
    return [line for line in lines if heal_line(line)]


def is_oom(failure: EngineFailure | None, lines: Iterable[str] = ()) -> bool:
    """True when ``failure`` is an out-of-memory (its kind, or a quoted or log line says so)."""
    if failure is not None and failure.kind == FailureKind.OUT_OF_MEMORY.value:
        return True
    quoted = () if failure is None else failure.quoted
    return any(heal_line(line) for line in (*quoted, *lines))
