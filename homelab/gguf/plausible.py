"""Is a model's geometry one llama.cpp could load? The bounds and checks ``geometry_of`` applies.

A header is read before anything else about a model is known, often from a foreign or
damaged file, and every later step (KV bytes, the budget, the flags) trusts the
geometry. So the numbers are checked once, here, against what llama.cpp itself
accepts: its hyper-parameters are ``uint32_t``, a layer that keeps KV needs heads of
non-zero width, the tensors must belong to the blocks the metadata counts, and a
quantized KV cache needs head widths that hold whole blocks
(``llama_init_from_model``: "K cache type q8_0 with block size 32 does not divide
n_embd_head_k=40"). What fails is a ``ModelFileError`` naming the key and the value
(or, for a cache type the model cannot take, a ``UsageError`` naming the setting).

The upper bounds are far above any released model (the widest: 128 heads, 576-wide MLA
heads, 10M-token context, 16k embedding) and far below what would make the arithmetic
absurd (``head_count_kv = 2**32 - 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from homelab.errors import ModelFileError, UsageError
from homelab.gguf.ggml_types import ggml_type
from homelab.gguf.header import GgufHeader, GgufModel
from homelab.gguf.tensor_info import block_of

if TYPE_CHECKING:  # geometry imports this module
    from homelab.gguf.geometry import LayerMemory

MAX_COUNT = 2**32 - 1
"""llama.cpp keeps hyper-parameters (context length, sliding window, ...) in ``uint32_t``."""
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20
"""Embedding, feed-forward and recurrent widths (the widest released: 53,248)."""
MAX_HEADS = 1 << 12
MAX_HEAD_DIM = 1 << 14
MAX_EXPERTS = 1 << 16
MAX_VOCAB = 1 << 24

REDOWNLOAD_HINT = "The file may be from a newer or broken converter; re-download or re-convert it."


def _fail(source: str, message: str, hint: str = REDOWNLOAD_HINT) -> ModelFileError:
    return ModelFileError(f"{source}: {message}", hint=hint)


def check_tensors(model: GgufModel | GgufHeader, arch: str, n_layer_all: int, n_layer: int) -> None:
    """The tensors are of known types and belong to the ``block_count`` blocks.

    Raises:
        ModelFileError: a tensor type homelab cannot size (its bytes would be guessed); a
            tensor of a block past ``block_count``; or, when every part is at hand, no
            tensors for the last blocks ``block_count`` promises (llama.cpp stops loading
            with "missing tensor").
    """
    parts = model.parts if isinstance(model, GgufModel) else (model,)
    source = parts[0].source_name
    tables = [part.table for part in parts]
    if any(table.has_unknown_sizes() for table in tables):
        unknown = [t for table in tables for t in table if t.n_bytes is None]
        names = sorted({t.type_name for t in unknown})
        raise _fail(
            source,
            f"{len(unknown)} tensor(s) have a ggml type homelab cannot size "
            f"({', '.join(names)}; e.g. {unknown[0].name!r})",
            hint="The file may need a newer llama.cpp and homelab than these; "
            "or pick another quant of the model.",
        )
    last = max((table.max_block() for table in tables), default=-1)  # per group, not per tensor
    if last >= n_layer_all:  # the first such tensor in file order is the one named
        for table in tables:
            for name in table.names:
                in_block = block_of(name)
                if in_block is not None and in_block[0] >= n_layer_all:
                    raise _fail(
                        source,
                        f"tensor {name!r} belongs to block {in_block[0]:,}, but "
                        f"{arch}.block_count is {n_layer_all}",
                    )
    whole = isinstance(model, GgufModel) or model.metadata.get("split.count", 1) == 1
    if whole and any(tables) and last + 1 < n_layer:
        where = f"stop at block {last}" if last >= 0 else "name no block"
        raise _fail(
            source,
            f"{arch}.block_count is {n_layer_all}, but the tensors {where}: "
            "llama.cpp would stop at a missing tensor",
        )


def check_kv_layers(
    source: str,
    arch: str,
    layers: Sequence[LayerMemory],
    n_head: Sequence[int],
    *,
    is_mla: bool,
    kv_only: bool,
) -> None:
    """Every layer that keeps KV has heads of non-zero width, and a KV model keeps some.

    Raises:
        ModelFileError: a KV layer has KV heads but no query heads, or heads of width 0;
            or (``kv_only``: an attention-only architecture) no layer keeps any KV.
    """
    kv = [layer for layer in layers if layer.kind in ("full", "swa")]
    for layer in kv:
        il, n_kv = layer.index, layer.n_head_kv
        if n_kv == 0:
            continue
        swa = "_swa" if layer.kind == "swa" else ""
        if n_head[il] == 0:
            raise _fail(
                source,
                f"layer {il} has {n_kv} KV heads but {arch}.attention.head_count is 0 there",
            )
        if layer.head_k == 0:
            raise _fail(
                source,
                f"layer {il} keeps a KV cache with K heads 0 wide "
                f"({arch}.attention.key_length{swa} is 0)",
            )
        if layer.head_v == 0 and not is_mla:
            raise _fail(
                source,
                f"layer {il} keeps a KV cache with V heads 0 wide "
                f"({arch}.attention.value_length{swa} is 0)",
            )
    if kv_only and not any(layer.k_width for layer in kv):
        raise _fail(
            source,
            f"{arch} is an attention model, but no layer keeps a KV cache "
            f"({arch}.attention.head_count_kv or head_count is 0 everywhere)",
        )


def check_cache_types(layers: Sequence[LayerMemory], arch: str, type_k: str, type_v: str) -> None:
    """A K or V cache of these types can hold this model's heads (whole blocks per head).

    llama.cpp refuses a context whose K (V) head width is not a multiple of the cache
    type's block ("K cache type q8_0 with block size 32 does not divide
    n_embd_head_k=40"), so llama-server would not start: say so before planning.

    Raises:
        UsageError: the cache type's block does not divide a KV layer's head width; the
            message names the width and the key it comes from, the hint the types that fit.
    """
    for which, cache_type in (("K", type_k), ("V", type_v)):
        try:
            block = ggml_type(cache_type).block_size
        except ValueError:  # not a cache type at all: the plan's own check words that
            continue
        if block == 1:
            continue
        for layer in layers:
            width = layer.head_k if which == "K" else layer.head_v
            if layer.kind not in ("full", "swa") or width % block == 0:
                continue
            key = "key_length" if which == "K" else "value_length"
            key += "_swa" if layer.kind == "swa" else ""
            raise UsageError(
                f"llama-server refuses a {cache_type} {which} cache for this model: "
                f"{cache_type} stores values in blocks of {block}, and the model's "
                f"{which} heads are {width} wide ({arch}.attention.{key}, layer "
                f"{layer.index})",
                hint=f"Set the {which} cache type to f16, bf16 or f32 for this model.",
                title="Cache type does not suit this model",
            )
