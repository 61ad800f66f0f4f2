"""vLLM's KV cache for one model, sized the way vLLM 0.33's planner sizes it.

Mirrors ``vllm/v1/kv_cache_interface.py`` and ``vllm/v1/core/kv_cache_planning.py``
(read, not copied): every attention layer keeps ``2 × kv_heads × head_dim`` elements
per token (MLA: ``kv_lora_rank + qk_rope_head_dim``, no separate V) in pages of
``block_size`` tokens. Layers are grouped by kind into groups of equal size; one
block of the shared pool holds one page for every layer of a group, and a request
takes, from that one pool:

- per full-attention group: ``cdiv(max_model_len, block_size)`` blocks;
- per sliding-window group: ``cdiv(min(window − 1 + max_num_batched_tokens, max_model_len), block_size) + 1``;
- per linear-attention (Gated DeltaNet) group: 2 blocks (prefix caching's ``align``
  mode keeps two states), whatever the length.

On a hybrid model the attention block grows until one attention page holds a
linear layer's state (``16 × cdiv(state, 16 × page_of_one_token)`` tokens) and the
state is padded to that page. One block is kept back (the null block), so a
max-model-len fits when its request needs at most ``pool − one block``.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.errors import UnknownArchitectureError, UsageError
from homelab.plan.vllm.config import LayerKind, ModelConfig

DEFAULT_BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
"""vLLM's CPU backend's block when none is asked for (vllm/platforms/cpu.py, non-MLA models)."""
BLOCK_ALIGNMENT = 16
"""Attention kernels take blocks in multiples of 16 tokens; hybrid blocks are rounded up to it."""
LINEAR_PAGES_PER_REQUEST = 2
"""Prefix caching puts linear layers in ``align`` mode: 2 states per request (no speculation)."""

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
"""What homelab plans for: the model's own 16-bit type, or 8-bit floats (1 byte)."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cache_dtype_bytes(model: ModelConfig, kv_cache_dtype: str) -> int:
    """Bytes per cached element: ``auto`` = the model's dtype, ``fp8*`` = 1.

    Raises:
        UsageError: a cache dtype homelab does not plan for.
    """
    if kv_cache_dtype == "auto":
        return model.dtype_bytes
    if kv_cache_dtype in KV_CACHE_DTYPES:
        return 1
    raise UsageError(
        f"cache type {kv_cache_dtype} (vLLM's --kv-cache-dtype) is not one homelab can price",
        hint=f"Use one of: {', '.join(KV_CACHE_DTYPES)}.",
    )


@dataclass(frozen=True, slots=True)
class KvGroup:
    """Layers of one kind that share a block table."""

    kind: LayerKind
    layers: int


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The pool's geometry for one model, cache dtype and batch size."""

    element_bytes: int
    token_layer_bytes: int
    """One token in one attention layer."""
    block_size: int
    page_bytes: int
    """One layer's page: ``block_size`` tokens (a linear layer's state is padded to it)."""
    group_size: int
    groups: tuple[KvGroup, ...]
    sliding_window: int | None
    max_num_batched_tokens: int
    linear_state_bytes: int | None
    """A linear layer's state before padding, when the model has linear layers."""

    @property
    def bytes_per_block(self) -> int:
        """One block of the shared pool: a page for each layer of a group."""
        return self.group_size * self.page_bytes

    @property
    def full_layers(self) -> int:
        return sum(g.layers for g in self.groups if g.kind == "full")

    @property
    def kv_bytes_per_token(self) -> int:
        """What one more token of context costs (full-attention layers only)."""
        return self.full_layers * self.token_layer_bytes

    def blocks_per_request(self, max_model_len: int) -> int:
        """Blocks one request of ``max_model_len`` tokens takes from the pool."""
        total = 0
        for group in self.groups:
            if group.kind == "full":
                total += cdiv(max_model_len, self.block_size)
            elif group.kind == "sliding":
                window = self.sliding_window or max_model_len
                tokens = min(window - 1 + self.max_num_batched_tokens, max_model_len)
                total += cdiv(tokens, self.block_size) + 1
            else:
                total += LINEAR_PAGES_PER_REQUEST
        return total

    def request_bytes(self, max_model_len: int) -> int:
        """KV memory one full-length request needs (vLLM's "KV cache is needed")."""
        return self.bytes_per_block * self.blocks_per_request(max_model_len)

    def fits(self, max_model_len: int, pool_bytes: int) -> bool:
        """Whether vLLM's start-up check passes: one request fits next to the null block."""
        return self.request_bytes(max_model_len) <= pool_bytes - self.bytes_per_block

    def longest_fitting(self, pool_bytes: int, upper: int) -> int:
        """The largest max-model-len ≤ ``upper`` that fits (vLLM's own binary search); 0 if none."""
        if upper < 1 or not self.fits(1, pool_bytes):
            return 0
        lo, hi = 1, upper
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fits(mid, pool_bytes):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def num_blocks(self, pool_bytes: int) -> int:
        return max(pool_bytes // self.bytes_per_block, 0)

    def max_concurrency(self, pool_bytes: int, max_model_len: int) -> float:
        """Full-length requests the pool holds at once (vLLM's "Maximum concurrency")."""
        return self.num_blocks(pool_bytes) / self.blocks_per_request(max_model_len)

    def cache_tokens(self, pool_bytes: int, max_model_len: int) -> int:
        """vLLM's logged "GPU KV cache size: N tokens" = concurrency × max-model-len."""
        return int(self.max_concurrency(pool_bytes, max_model_len) * max_model_len)


def kv_layout(
    model: ModelConfig,
    kv_cache_dtype: str,
    max_num_batched_tokens: int,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> KvLayout:
    """Group the model's layers and size pages as vLLM does.

    Raises:
        UsageError: an unknown cache dtype.
        UnknownArchitectureError: no attention layer at all (nothing to size a block by).
    """
    element = cache_dtype_bytes(model, kv_cache_dtype)
    if model.mla is not None:
        token_layer = model.mla.width * element
    else:
        token_layer = 2 * model.num_kv_heads * model.head_dim * element
    if model.count("full") + model.count("sliding") == 0:
        raise UnknownArchitectureError(
            f"{model.name} has no attention layer homelab can size a KV block by"
        )
    block = block_size
    state = model.linear.state_bytes if model.linear is not None and model.is_hybrid else None
    if state is not None:
        block = max(block, BLOCK_ALIGNMENT * cdiv(state, BLOCK_ALIGNMENT * token_layer))
    counts = {
        kind: model.count(kind) for kind in ("full", "sliding", "linear") if model.count(kind)
    }
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < smallest * 1.5 else smallest
    groups: list[KvGroup] = []
    for kind, n in counts.items():
        for i in range(cdiv(n, group_size)):
            groups.append(KvGroup(kind, min(group_size, n - i * group_size)))  # type: ignore[arg-type]
    return KvLayout(
        element_bytes=element,
        token_layer_bytes=token_layer,
        block_size=block,
        page_bytes=block * token_layer,
        group_size=group_size,
        groups=tuple(groups),
        sliding_window=model.sliding_window,
        max_num_batched_tokens=max_num_batched_tokens,
        linear_state_bytes=state,
    )
