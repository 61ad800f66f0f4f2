"""What a tensor takes in a CUDA card's model buffer: a few bytes more than the file holds.

What llama.cpp does (pinned build, ``ggml/src/ggml-cuda/ggml-cuda.cu``,
``ggml_backend_cuda_buffer_type_get_alloc_size``): a *quantized* tensor whose rows are not
a multiple of ``MATRIX_ROW_PADDING`` (512, ``ggml-cuda/common.cuh``) values long gets the
bytes of ``512 - ne0 % 512`` more values of its type once, after its last row (the
matrix kernels read whole 512-value rows; the loader zeroes the pad). Plain types
(F32, F16, BF16, the integers) are never padded. Then ``ggml-alloc.c``
(``ggml_backend_alloc_ctx_tensors_from_buft``) rounds each tensor up to the buffer type's
alignment, 128 on CUDA, and the model buffer is the sum.

Only a local CUDA card pays this. llama.cpp's CPU backend (mapped file or not) and an
rpc-server over the CPU backend pad nothing, so a worker's or system RAM's share stays
the file's own bytes.
"""

from __future__ import annotations

from homelab.gguf.ggml_types import GGML_TYPES, row_bytes

MATRIX_ROW_PADDING = 512
"""``MATRIX_ROW_PADDING`` in ``ggml-cuda/common.cuh``: quantized rows padded to this many values."""
CUDA_ALIGNMENT = 128
"""``ggml_backend_cuda_buffer_type_get_alignment``: every tensor starts on this many bytes."""


def cuda_alloc_size(ggml_type: int, shape: tuple[int, ...], n_bytes: int) -> int:
    """Bytes one tensor of ``n_bytes`` takes in a CUDA model buffer (pad, then align).

    An unknown type (``n_bytes`` then comes from elsewhere) is aligned only: its padding
    cannot be known, and the plan never guesses it.
    """
    kind = GGML_TYPES.get(ggml_type)
    size = n_bytes
    ne0 = shape[0] if shape else 1
    if kind is not None and kind.block_size > 1 and ne0 % MATRIX_ROW_PADDING:
        # ggml_is_quantized is exactly the types stored in blocks (ggml.c's type_traits)
        size += row_bytes(ggml_type, MATRIX_ROW_PADDING - ne0 % MATRIX_ROW_PADDING)
    return -(-size // CUDA_ALIGNMENT) * CUDA_ALIGNMENT
