"""Which weights llama.cpp's CPU backend copies into its ``CPU_REPACK`` buffer, and how big
that copy is, at the pinned build (b11312, ``ggml/src/ggml-cpu/repack.cpp``).

The loader (``make_cpu_buft_list`` in ``src/llama-model.cpp``) offers a tensor kept on the CPU
these buffer types in order: the first device's *host* buffer (``CUDA_Host`` when a CUDA card
is in the model's devices; an RPC device has none), then the CPU backend's extra types
(``CPU_REPACK``), then the plain CPU type; it takes the first whose device supports the op.
With mmap the host buffer is swapped for the plain CPU type (the ``CPU_Mapped`` span), so
beside a CUDA card nothing is ever repacked (``--no-host`` would allow it; homelab never
passes it). Otherwise ``CPU_REPACK`` takes a weight when
``ggml_repack_get_optimal_repack_type`` has a layout for it — by type, the CPU features the
engine was *compiled* with (``ggml_cpu_has_avx2`` is ``#if defined(__AVX2__)``) and
``ne[1] % 8 == 0`` — and its op is ``MUL_MAT`` on a 2-D weight or ``MUL_MAT_ID`` on a 3-D
routed expert (``extra_buffer_type::supports_op``); the input embedding (``GET_ROWS``), norms
and biases never are. On x86-64: Q4_0, Q4_K, IQ4_NL and MXFP4 with AVX2, Q2_K with
AVX512F; Q8_0, Q5_K and Q6_K have layouts only for ARM and RISC-V.

The repacked copy has the tensor's own size (the buffer type has no ``get_alloc_size``, so
``ggml_nbytes``), each padded to ``TENSOR_ALIGNMENT`` (32 B) in one buffer of their sum
(``ggml_backend_alloc_ctx_tensors_from_buft``). It is anonymous memory the engine holds,
and it leaves the mapped range: the ``CPU_Mapped`` span covers only the CPU's other tensors.
"""

from __future__ import annotations

from collections.abc import Iterable

REPACK_ALIGNMENT = 32
"""``TENSOR_ALIGNMENT``: ``CPU_REPACK``'s alignment, each tensor padded to it."""
ROW_GROUP = 8
"""The x86 layouts interleave 8 rows (``_8x8``): ``ne[1]`` must be a multiple."""

X86_REPACK = {
    "Q4_0": "avx2",
    "Q4_K": "avx2",
    "IQ4_NL": "avx2",
    "MXFP4": "avx2",
    "Q2_K": "avx512f",
}
"""Type → the x86 feature its repacked layout needs (``/proc/cpuinfo`` flag names)."""

REPACKED_SOMEWHERE = frozenset({*X86_REPACK, "Q8_0", "Q5_K", "Q6_K", "Q1_0"})
"""Types some CPU (ARM, RISC-V) repacks: on a CPU homelab does not know, their term is unknown."""

BUILT_X86 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})
"""What homelab's engine build compiles for (``-DGGML_NATIVE=OFF``: ggml's ``INS_ENB``
options; AVX512 is off by default), so what its CPU backend can use on any x86-64 CPU."""


def engine_features(cpu_flags: Iterable[str] | None) -> frozenset[str] | None:
    """The features the engine's CPU backend uses on this CPU: what it was built for and the
    CPU has; None when the CPU is not known (not an x86-64 CPU homelab can read)."""
    if cpu_flags is None:
        return None
    return BUILT_X86 & frozenset(cpu_flags)


def repacks(type_name: str, rows: int | None, features: frozenset[str] | None) -> bool | None:
    """The CPU backend repacks this weight (``rows``: its ``ne[1]``, None when its op is not a
    matrix product); None when that depends on a CPU homelab does not know."""
    if rows is None or type_name not in REPACKED_SOMEWHERE:
        return False
    if features is None:
        return None
    needs = X86_REPACK.get(type_name)
    return needs is not None and needs in features and rows % ROW_GROUP == 0


def repacked_size(n_bytes: int) -> int:
    """The weight's bytes in the ``CPU_REPACK`` buffer."""
    return -(-n_bytes // REPACK_ALIGNMENT) * REPACK_ALIGNMENT
