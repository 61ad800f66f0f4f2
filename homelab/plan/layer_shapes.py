"""A model's KV layers grouped by shape: what one planning pass prices hundreds of times.

Every candidate (context, slots) the fitter tries sizes the KV cache and the compute
buffer from the KV layers' widths. A model has a few layer shapes (full and sliding
attention, maybe two head sizes) but may have thousands of blocks; grouping them once
per geometry makes each candidate cost the shapes, not the blocks. The grouping is kept
for the last few ``Geometry.layers`` tuples seen (by identity, the tuple held so its id
is not reused), because the planner builds many candidates over one geometry.
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.gguf.geometry import Geometry, LayerMemory

_KEEP = 64
_SEEN: dict[int, tuple[tuple[LayerMemory, ...], tuple[KvShape, ...]]] = {}


@dataclass(frozen=True, slots=True)
class KvShape:
    """Layers that keep KV cells of one shape, and how many there are."""

    kind: str
    """``full`` or ``swa``."""
    k_width: int
    v_width: int
    n_head_kv: int
    count: int


def kv_shapes(geometry: Geometry) -> tuple[KvShape, ...]:
    """The KV layers (``full`` and ``swa``) grouped by (kind, K width, V width, KV heads),
    in the order each shape first appears."""
    layers = geometry.layers
    seen = _SEEN.get(id(layers))
    if seen is not None and seen[0] is layers:
        return seen[1]
    counts: dict[tuple[str, int, int, int], int] = {}
    for layer in layers:
        if layer.kind in ("full", "swa"):
            key = (layer.kind, layer.k_width, layer.v_width, layer.n_head_kv)
            counts[key] = counts.get(key, 0) + 1
    shapes = tuple(KvShape(*key, count) for key, count in counts.items())
    if len(_SEEN) >= _KEEP:
        _SEEN.clear()
    _SEEN[id(layers)] = (layers, shapes)
    return shapes
