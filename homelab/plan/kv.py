"""KV cache and recurrent state bytes, sized exactly as llama.cpp sizes them.

Given a ``Geometry`` and the context settings llama-server will run with, this
computes what llama-server allocates: the context padding to 256, the per-slot
split when the KV is not unified, the sliding-window cache per stream, MLA's
K-only cache, V rows padded to the widest layer when flash attention is off,
and the F32 recurrent state per sequence. The total must equal the sum of
llama-server's ``llama_kv_cache: size =`` and ``llama_memory_recurrent: size =``
log lines (tests check it against the real engine).
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.errors import UsageError
from homelab.gguf.geometry import Geometry
from homelab.gguf.ggml_types import row_bytes
from homelab.plan.layer_shapes import kv_shapes

CTX_PAD = 256
"""llama.cpp pads n_ctx (and the per-slot context, and the SWA cache) to 256 cells."""

CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
"""The -ctk/-ctv values llama-server accepts."""


def pad(n: int, multiple: int = CTX_PAD) -> int:
    """Round ``n`` up to a multiple (GGML_PAD)."""
    return (n + multiple - 1) // multiple * multiple


@dataclass(frozen=True, slots=True)
class KvSettings:
    """The llama-server settings that decide the cache's size."""

    n_ctx: int
    """``-c`` as given (0 means the trained context)."""
    n_seq: int = 1
    """``-np``: slots, i.e. sequences decoded at once."""
    unified: bool = False
    """``-kvu``: one shared pool instead of one stream per slot."""
    n_ubatch: int = 512
    n_batch: int = 2048
    type_k: str = "q8_0"
    type_v: str = "q8_0"
    flash_attn: bool = True

    def __post_init__(self) -> None:
        for name, value in (("cache type K", self.type_k), ("cache type V", self.type_v)):
            if value not in CACHE_TYPES:
                raise UsageError(
                    f"{name} {value!r} is not one llama-server accepts",
                    hint=f"Use one of: {', '.join(CACHE_TYPES)}.",
                )
        if self.n_seq < 1:
            raise UsageError(f"parallel slots must be at least 1, not {self.n_seq}")
        if self.n_ctx < 0:
            raise UsageError(f"context size cannot be negative ({self.n_ctx})")
        if self.type_v not in ("f32", "f16", "bf16") and not self.flash_attn:
            raise UsageError(
                f"a quantized V cache ({self.type_v}) needs flash attention",
                hint="llama-server refuses -ctv q* with -fa off; keep flash attention on.",
            )


@dataclass(frozen=True, slots=True)
class KvAllocation:
    """What llama-server allocates for conversations, in bytes, with the cell counts."""

    n_ctx: int
    """Total cells after padding (what llama-server reports as n_ctx)."""
    ctx_per_seq: int
    """Cells each stream holds (``n_ctx_seq``)."""
    n_stream: int
    ctx_per_slot: int
    """Tokens one slot may use: the stream size, capped at the trained context."""
    swa_cells: int
    """Cells per stream of the sliding-window cache (0 without SWA layers)."""
    full_k: int
    full_v: int
    swa_k: int
    swa_v: int
    recurrent_r: int
    recurrent_s: int
    bytes_per_token: int
    """K+V bytes one more token of context costs in the full-attention cache."""

    @property
    def full_bytes(self) -> int:
        return self.full_k + self.full_v

    @property
    def swa_bytes(self) -> int:
        return self.swa_k + self.swa_v

    @property
    def recurrent_bytes(self) -> int:
        return self.recurrent_r + self.recurrent_s

    @property
    def total(self) -> int:
        """Everything: full KV + SWA KV + recurrent state."""
        return self.full_bytes + self.swa_bytes + self.recurrent_bytes


def context_cells(settings: KvSettings, trained_ctx: int) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, n_stream) as llama_context computes them."""
    n_ctx = pad(settings.n_ctx or trained_ctx)
    if settings.unified:
        return n_ctx, n_ctx, 1
    n_ctx_seq = pad(n_ctx // settings.n_seq)
    return n_ctx_seq * settings.n_seq, n_ctx_seq, settings.n_seq


def kv_allocation(geometry: Geometry, settings: KvSettings) -> KvAllocation:
    """Bytes llama-server will allocate for KV, SWA and recurrent state at these settings."""
    n_ctx, ctx_seq, n_stream = context_cells(settings, geometry.trained_ctx)
    n_ubatch = min(settings.n_ubatch, settings.n_batch, n_ctx)
    shapes = kv_shapes(geometry)
    swa_cells = 0
    if any(shape.kind == "swa" for shape in shapes):
        window = geometry.n_swa * (settings.n_seq if settings.unified else 1) + n_ubatch
        swa_cells = pad(min(ctx_seq, window))
    v_max = max((shape.v_width for shape in shapes), default=0)

    sums = {"full_k": 0, "full_v": 0, "swa_k": 0, "swa_v": 0}
    per_token_k = per_token_v = 0
    for shape in shapes:  # each shape priced once, times its layers
        cells = (swa_cells if shape.kind == "swa" else ctx_seq) * n_stream
        v_width = shape.v_width if (settings.flash_attn or shape.v_width == 0) else v_max
        k_row = row_bytes(settings.type_k, shape.k_width) * shape.count
        v_row = row_bytes(settings.type_v, v_width) * shape.count if v_width else 0
        sums[f"{shape.kind}_k"] += k_row * cells
        sums[f"{shape.kind}_v"] += v_row * cells
        if shape.kind == "full":
            per_token_k += k_row
            per_token_v += v_row

    n_rs = max(1, settings.n_seq)
    n_recurrent = len(geometry.recurrent_layers)
    return KvAllocation(
        n_ctx=n_ctx,
        ctx_per_seq=ctx_seq,
        n_stream=n_stream,
        ctx_per_slot=min(ctx_seq, geometry.trained_ctx) if geometry.trained_ctx else ctx_seq,
        swa_cells=swa_cells,
        recurrent_r=4 * geometry.n_embd_r * n_rs * n_recurrent,
        recurrent_s=4 * geometry.n_embd_s * n_rs * n_recurrent,
        bytes_per_token=per_token_k + per_token_v,
        **sums,
    )
