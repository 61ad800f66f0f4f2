"""A model's KV layers grouped by shape: what one planning pass prices hundreds of times.

Every candidate (context, slots) the fitter tries sizes the KV cache and the compute
buffer from the KV layers' widths. A model has a few layer shapes (full and sliding
attention, maybe two head sizes) but may have thousands of blocks; grouping them once
per geometry makes each candidate cost the shapes, not the blocks. The grouping is kept
for the last few ``Geometry.layers`` tuples seen (by identity, the tuple held so its id
is not reused), because the planner builds many candidates over one geometry.

A partial offload prices the layers from some block on, for a dozen blocks in a
bisection: :func:`later_layers` counts their shapes from where each shape lies among the
whole model's layers, not by walking the thousands of layers again.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass
from itertools import compress, count
from operator import attrgetter

from homelab.gguf.geometry import Geometry, LayerMemory

_SHAPE = attrgetter("kind", "k_width", "v_width", "n_head_kv")
_KEEP = 64
_SEEN: dict[int, tuple[tuple[LayerMemory, ...], tuple[KvShape, ...]]] = {}
_PLACES: dict[int, tuple[tuple[LayerMemory, ...], dict[tuple[str, int, int, int], list[int]]]] = {}


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
    counts = Counter(map(_SHAPE, layers))  # in the order each first appears
    shapes = tuple(KvShape(*key, n) for key, n in counts.items() if key[0] in ("full", "swa"))
    _keep(layers, shapes)
    return shapes


def later_layers(geometry: Geometry, first: int) -> Geometry:
    """The geometry of the layers from block ``first`` on (:meth:`Geometry.from_block`), its
    KV shapes (as :func:`kv_shapes` would group them) counted from where each shape lies
    among the whole's layers."""
    sub = geometry.from_block(first)
    whole, part = geometry.layers, sub.layers
    at = len(whole) - len(part)
    if whole[at:] != part:  # not a tail of the whole (layers out of order): grouped when asked
        return sub
    found = []
    for key, places in _places(whole).items():
        k = bisect_left(places, at)
        if k < len(places):
            found.append((places[k], key, len(places) - k))
    found.sort()  # in the order each shape first appears among the later layers
    _keep(part, tuple(KvShape(*key, n) for _, key, n in found))
    return sub


def _places(layers: tuple[LayerMemory, ...]) -> dict[tuple[str, int, int, int], list[int]]:
    """Where each KV shape lies among ``layers`` (positions, ascending), kept like ``_SEEN``."""
    seen = _PLACES.get(id(layers))
    if seen is not None and seen[0] is layers:
        return seen[1]
    keys = list(map(_SHAPE, layers))
    places = {  # each shape's positions, in one comparison a layer (done in C)
        key: list(compress(count(), map(key.__eq__, keys)))
        for key in dict.fromkeys(keys)
        if key[0] in ("full", "swa")
    }
    if len(_PLACES) >= _KEEP:
        _PLACES.clear()
    _PLACES[id(layers)] = (layers, places)
    return places


def _keep(layers: tuple[LayerMemory, ...], shapes: tuple[KvShape, ...]) -> None:
    if len(_SEEN) >= _KEEP:
        _SEEN.clear()
    _SEEN[id(layers)] = (layers, shapes)
