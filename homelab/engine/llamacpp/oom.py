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
_SIZE = re.compile(r"failed to allocate (\S+) buffer of size (\d+)")


def oom_line(line: str) -> bool:
    """True when ``line`` says an allocation failed."""
    found = parse_failure_line(line)
    if found is not None and found.kind is FailureKind.OUT_OF_MEMORY:
        return True
    return _MORE.search(line) is not None


def oom_lines(lines: Iterable[str]) -> list[str]:
    """The lines of ``lines`` that say an allocation failed, in order."""
    return [line for line in lines if oom_line(line)]


def is_oom(failure: EngineFailure | None, lines: Iterable[str] = ()) -> bool:
    """True when ``failure`` is an out-of-memory (its kind, or a quoted or log line says so)."""
    if failure is not None and failure.kind == FailureKind.OUT_OF_MEMORY.value:
        return True
    quoted = () if failure is None else failure.quoted
    return any(oom_line(line) for line in (*quoted, *lines))


def failed_allocation(lines: Iterable[str]) -> tuple[str, int] | None:
    """(buffer type, bytes) of the first "failed to allocate X buffer of size N"; None."""
    for line in lines:
        m = _SIZE.search(line)
        if m is not None:
            return m.group(1), int(m.group(2))
    return None
