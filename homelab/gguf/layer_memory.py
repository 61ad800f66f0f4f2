"""What each layer of a model keeps in memory, as llama.cpp's loader decides it: a KV cache
(full attention or a sliding window), a recurrent state, or nothing of its own (an MLP-only
block, a layer that reuses another's KV, a NextN/MTP layer the main context skips).

:func:`layer_memories` applies an architecture's rules (``homelab.gguf.archs``) to the
generic hyper-parameters (:class:`Hparams`) layer by layer; :mod:`homelab.gguf.geometry`
reads those from the header and checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from homelab.gguf.archs import ArchRule

LayerKind = Literal["full", "swa", "recurrent", "none"]


@dataclass(frozen=True, slots=True)
class LayerMemory:
    """What one layer keeps per token (KV) or per sequence (recurrent state)."""

    index: int
    kind: LayerKind
    n_head_kv: int
    k_width: int
    """Elements of K per cell (``n_embd_k_gqa``); 0 when the layer keeps no KV."""
    v_width: int
    """Elements of V per cell; 0 for MLA (V is a view of K) or no KV."""
    also_recurrent: bool = False
    """A layer with both KV and a recurrent state (falcon-h1 style)."""
    why_none: str | None = None
    """For ``kind == "none"``: why this layer owns no memory."""
    head_k: int = 0
    """Elements of one K head (``n_embd_head_k``; ``k_width = head_k * n_head_kv``)."""
    head_v: int = 0
    """Elements of one V head (``n_embd_head_v``; for MLA V is a view of K all the same)."""


@dataclass(frozen=True, slots=True)
class Hparams:
    """The generic hyper-parameters every architecture's rules are applied to."""

    n_layer_all: int
    n_layer: int
    n_embd: int
    trained_ctx: int
    n_head: list[int]
    n_head_kv: list[int]
    n_ff: list[int]
    head_k: int
    head_v: int
    head_k_swa: int
    head_v_swa: int


_LayerFields = tuple[LayerKind, int, int, int, bool, str | None, int, int]
"""A ``LayerMemory``'s fields after its index."""


def layer_memories(
    rule: ArchRule,
    hp: Hparams,
    is_swa: list[bool],
    is_recr: list[bool],
    is_mla: bool,
    kv_from_start: int | None,
) -> list[LayerMemory]:
    """Every layer's memory (:func:`_layer`), worked out once for each distinct set of the
    figures it depends on: a model of thousands of blocks has a handful."""
    n_layer, worked = hp.n_layer, dict[tuple[object, ...], _LayerFields]()
    layers = []
    for il in range(hp.n_layer_all):
        past = (il >= n_layer, kv_from_start is not None and il >= kv_from_start)
        key = (is_swa[il], is_recr[il], hp.n_ff[il], hp.n_head_kv[il], *past)
        fields = worked.get(key)
        if fields is None:
            fields = worked[key] = _layer(
                rule, hp, il, is_swa[il], is_recr[il], is_mla, kv_from_start
            )
        layers.append(LayerMemory(il, *fields))
    return layers


def _layer(
    rule: ArchRule,
    hp: Hparams,
    il: int,
    swa: bool,
    recurrent: bool,
    is_mla: bool,
    kv_from_start: int | None,
) -> _LayerFields:
    """What layer ``il`` keeps: a KV cache (full or sliding), a recurrent state, or nothing
    (``LayerMemory``'s fields after the index). It depends on ``il`` only through whether it
    is past ``n_layer`` and past ``kv_from_start``."""
    why = _why_no_kv(rule, il, hp.n_layer, recurrent, hp.n_ff[il], kv_from_start)
    recurrent_here = rule.memory != "kv" and _keeps_recurrent(
        rule, il, hp.n_layer, recurrent, hp.n_ff[il]
    )
    n_head_kv = hp.n_head_kv[il]
    if why is None:
        hk, hv = (hp.head_k_swa, hp.head_v_swa) if swa else (hp.head_k, hp.head_v)
        kind: LayerKind = "swa" if swa else "full"
        v_width = 0 if is_mla else hv * n_head_kv
        return (kind, n_head_kv, hk * n_head_kv, v_width, recurrent_here, None, hk, hv)
    if recurrent_here:
        return ("recurrent", n_head_kv, 0, 0, False, None, 0, 0)
    return ("none", n_head_kv, 0, 0, False, why, 0, 0)


def _why_no_kv(
    rule: ArchRule, il: int, n_layer: int, recurrent: bool, n_ff: int, kv_from_start: int | None
) -> str | None:
    """None when layer ``il`` owns a KV cache in the main context, else the reason it does not."""
    if kv_from_start is not None and il >= kv_from_start:
        return "reuses an earlier layer's KV cache"
    if rule.memory == "recurrent":
        return "recurrent"
    if rule.memory == "hybrid":
        if rule.hybrid_filter == "qwen":
            if il >= n_layer:
                return "NextN/MTP layer (not in the main context)"
            return "recurrent" if recurrent else None
        if rule.hybrid_filter == "nemotron":
            if recurrent:
                return "recurrent"
            return "MLP-only block" if n_ff != 0 else None
        if rule.hybrid_filter == "both":
            return None
        return "recurrent" if recurrent else None
    if il >= n_layer and n_layer > 0:
        return "NextN/MTP layer (not in the main context)"
    return None


def _keeps_recurrent(rule: ArchRule, il: int, n_layer: int, recurrent: bool, n_ff: int) -> bool:
    if rule.memory == "recurrent":
        return True
    if rule.hybrid_filter == "qwen":
        return il < n_layer and recurrent
    if rule.hybrid_filter == "nemotron":
        return recurrent and n_ff == 0
    if rule.hybrid_filter == "both":
        return True
    return recurrent
