"""A model's memory geometry: which layers keep KV, of what size, and what state.

``geometry_of(model)`` turns a GGUF header into a ``Geometry``: for each layer
whether it keeps a KV cache (full attention or sliding window), a recurrent
state, or nothing of its own (an MLP-only block, a layer that reuses another's
KV, a NextN/MTP layer the main context skips), with its K and V row widths.
The per-architecture rules live in ``homelab.gguf.archs``; this module applies
them to the generic hyper-parameters the way llama.cpp's loader does.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import attrgetter, or_

from homelab.errors import ModelFileError, UnknownArchitectureError
from homelab.gguf.arch_keys import ArchKeys
from homelab.gguf.archs import ArchRule, rule_for
from homelab.gguf.header import GgufHeader, GgufModel, LazyArray
from homelab.gguf.layer_memory import Hparams, LayerKind, LayerMemory, layer_memories
from homelab.gguf.plausible import (
    MAX_EXPERTS,
    MAX_HEAD_DIM,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_VOCAB,
    MAX_WIDTH,
    check_kv_layers,
    check_tensors,
)

__all__ = ["Geometry", "LayerKind", "LayerMemory", "geometry_of"]


@dataclass(frozen=True, slots=True)
class Geometry:
    """Everything about a model that sizes its KV cache and recurrent state."""

    arch: str
    n_layer_all: int
    """``block_count``, NextN/MTP layers included."""
    n_layer: int
    """Layers of the main model (``block_count - nextn_predict_layers``)."""
    layers: tuple[LayerMemory, ...]
    trained_ctx: int
    n_embd: int
    n_head: int
    n_vocab: int | None
    n_swa: int
    """Sliding window in tokens; 0 when the model has no SWA layers."""
    is_mla: bool
    n_embd_r: int
    """Elements per sequence of a recurrent layer's conv/shift state (F32)."""
    n_embd_s: int
    """Elements per sequence of a recurrent layer's SSM/WKV state (F32)."""
    verified: bool
    """True when this architecture's rules were checked against llama-server's log."""
    notes: tuple[str, ...] = field(default=())
    n_ff_max: int = 0
    """Widest feed-forward a token passes through (dense, or the routed experts together)."""
    ssm_d_inner: int = 0
    """Inner width of the recurrent (Mamba / Gated-DeltaNet) mixer; 0 without recurrent layers."""

    _sorted: dict[str, tuple[LayerMemory, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """The layers of each kind, sorted out once when first asked: a plan asks per candidate
    (hundreds of times), and a model may have thousands of layers."""

    _ascending: list[bool] = field(default_factory=list, init=False, repr=False, compare=False)
    """Whether the layers' indices ascend (they do in a header's geometry), once asked."""

    def _of_kind(self, kind: str) -> tuple[LayerMemory, ...]:
        found = self._sorted.get(kind)
        if found is None:
            found = self._sorted[kind] = tuple(compress(self.layers, _KINDS[kind](self.layers)))
        return found

    def from_block(self, first: int) -> Geometry:
        """The geometry of the layers from block ``first`` on (those a card holds under
        ``-ngl``), its layers of each kind cut from these: a bisection, not a pass over
        thousands of layers, when the indices ascend."""
        layers = self.layers
        if not self._ascending:
            indices = list(map(_INDEX, layers))
            self._ascending.append(indices == sorted(indices))
        if not self._ascending[0]:
            kept = map(first.__le__, map(_INDEX, layers))
            return replace(self, layers=tuple(compress(layers, kept)))
        sub = replace(self, layers=layers[bisect_left(layers, first, key=_INDEX) :])
        for kind in _KINDS:
            whole = self._of_kind(kind)
            sub._sorted[kind] = whole[bisect_left(whole, first, key=_INDEX) :]
        return sub

    @property
    def kv_layers(self) -> tuple[LayerMemory, ...]:
        return self._of_kind("kv")

    @property
    def full_layers(self) -> tuple[LayerMemory, ...]:
        return self._of_kind("full")

    @property
    def swa_layers(self) -> tuple[LayerMemory, ...]:
        return self._of_kind("swa")

    @property
    def recurrent_layers(self) -> tuple[LayerMemory, ...]:
        return self._of_kind("recurrent")


_KIND = attrgetter("kind")
_INDEX = attrgetter("index")
_KINDS: dict[str, Callable[[Iterable[LayerMemory]], Iterable[bool]]] = {
    "kv": lambda layers: map(("full", "swa").__contains__, map(_KIND, layers)),
    "full": lambda layers: map("full".__eq__, map(_KIND, layers)),
    "swa": lambda layers: map("swa".__eq__, map(_KIND, layers)),
    "recurrent": lambda layers: map(
        or_, map("recurrent".__eq__, map(_KIND, layers)), map(attrgetter("also_recurrent"), layers)
    ),
}
"""Which layers each of ``Geometry``'s layer lists holds."""


def _swa_flags(meta: ArchKeys, rule: ArchRule, hp: Hparams) -> tuple[int, list[bool]]:
    """(n_swa, per-layer is_swa), as llama.cpp's load_swa_pattern / set_swa_pattern do."""
    n_layer, n_layer_all = hp.n_layer, hp.n_layer_all
    none = [False] * n_layer_all
    if rule.swa is None:
        return 0, none
    n_swa = meta.uint("attention.sliding_window", rule.swa_default_window)
    if n_swa == 0 and rule.swa_needs_window:
        return 0, none
    if rule.swa == "all_attention":
        return n_swa, [True] * n_layer + [False] * (n_layer_all - n_layer)
    flags = meta.bool_array("attention.sliding_window_pattern", n_layer_all)
    if flags is not None:
        return n_swa, flags
    n_pattern = meta.uint("attention.sliding_window_pattern", rule.swa_pattern)
    pattern = [n_pattern == 0 or (il % n_pattern < n_pattern - 1) for il in range(n_layer)]
    return n_swa, pattern + [False] * (n_layer_all - n_layer)


def _recurrent_flags(meta: ArchKeys, rule: ArchRule, hp: Hparams) -> list[bool]:
    n_layer, n_layer_all, n_head_kv, n_ff = hp.n_layer, hp.n_layer_all, hp.n_head_kv, hp.n_ff
    if rule.memory == "recurrent":
        return [True] * n_layer_all
    if rule.recurrent == "interval":
        flags = meta.bool_array("attention.recurrent_layers", n_layer_all)
        if flags is not None:
            return flags
        interval = meta.uint("full_attention_interval", 4)
        if interval == 0:
            raise meta.fail(f"{meta.arch}.full_attention_interval", "is 0")
        return [il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all)]
    if rule.recurrent == "no_kv_heads":
        return [il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all)]
    if rule.recurrent == "no_kv_heads_no_ff":
        return [il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_layer_all)]
    return [False] * n_layer_all


def _recurrent_widths(meta: ArchKeys, n_embd: int) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) in F32 elements per sequence, as llama_hparams computes them."""
    l_cache = meta.uint("shortconv.l_cache", 0, high=MAX_WIDTH)
    if l_cache:
        return n_embd * (l_cache - 1), 0
    d_conv = meta.uint("ssm.conv_kernel", 0, high=MAX_WIDTH)
    d_inner = meta.uint("ssm.inner_size", 0, high=MAX_WIDTH)
    d_state = meta.uint("ssm.state_size", 0, high=MAX_WIDTH)
    n_group = meta.uint("ssm.group_count", 0, high=MAX_WIDTH)
    n_conv = max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state)
    return n_conv, d_state * d_inner


def geometry_of(model: GgufModel | GgufHeader) -> Geometry:
    """Read a model's memory geometry from its GGUF header.

    Raises:
        UnknownArchitectureError: homelab has no verified rules for this architecture
            (the message names it; nothing is guessed silently).
        ModelFileError: a key the architecture needs is missing or malformed.
    """
    header = model.header if isinstance(model, GgufModel) else model
    arch, rule = _arch_rule(header)
    meta = ArchKeys(header, arch)
    hp = _hparams(meta)
    is_mla = rule.mla and (
        f"{arch}.attention.key_length_mla" in meta.values
        and f"{arch}.attention.value_length_mla" in meta.values
    )
    n_swa, is_swa = _swa_flags(meta, rule, hp)
    is_recr = _recurrent_flags(meta, rule, hp)
    kv_from_start = rule.kv_from_start(meta.values, arch, hp.n_layer_all)
    if kv_from_start is not None and kv_from_start <= 0:
        key = f"{arch}.attention.shared_kv_layers"
        raise meta.fail(key, f"is {meta.values.get(key)!r}: no layer would own a KV cache")
    layers = layer_memories(rule, hp, is_swa, is_recr, is_mla, kv_from_start)
    check_kv_layers(
        header.source_name, arch, layers, hp.n_head, is_mla=is_mla, kv_only=rule.memory == "kv"
    )
    check_tensors(model, arch, hp.n_layer_all, hp.n_layer)
    n_embd_r, n_embd_s = (0, 0)
    if any(layer.kind == "recurrent" or layer.also_recurrent for layer in layers):
        n_embd_r, n_embd_s = _recurrent_widths(meta, hp.n_embd)
    n_vocab = _vocab_size(header, meta)
    n_ff_max = _widest_ff(meta, hp.n_ff)
    return Geometry(
        n_ff_max=n_ff_max,
        ssm_d_inner=meta.uint("ssm.inner_size", 0, high=MAX_WIDTH) if n_embd_s else 0,
        arch=arch,
        n_layer_all=hp.n_layer_all,
        n_layer=hp.n_layer,
        layers=tuple(layers),
        trained_ctx=hp.trained_ctx,
        n_embd=hp.n_embd,
        n_head=hp.n_head[0],
        n_vocab=n_vocab,
        n_swa=n_swa if any(layer.kind == "swa" for layer in layers) else 0,
        is_mla=is_mla,
        n_embd_r=n_embd_r,
        n_embd_s=n_embd_s,
        verified=rule.verified,
        notes=() if rule.verified else (_unverified_note(arch),),
    )


def _arch_rule(header: GgufHeader) -> tuple[str, ArchRule]:
    """The header's architecture and homelab's rules for it; refused when there are none."""
    arch = header.arch
    if arch is None:
        raise ModelFileError(
            f"{header.source_name}: no general.architecture in the GGUF metadata",
            hint="This is not a llama.cpp model file (maybe an adapter, a vocab-only file or a projector).",
        )
    rule = rule_for(arch)
    if rule is None:
        raise UnknownArchitectureError(
            f"{header.source_name}: architecture {arch!r} is not one homelab knows how to size",
            hint="Its KV layout cannot be derived exactly; pass --ctx and --parallel yourself, "
            "or open an issue naming the architecture.",
        )
    return arch, rule


def _hparams(meta: ArchKeys) -> Hparams:
    """The layer counts, widths and heads (per layer where llama.cpp allows an array)."""
    n_layer_all = meta.uint("block_count", low=1, high=MAX_LAYERS)
    n_nextn = meta.uint("nextn_predict_layers", 0, high=n_layer_all)
    n_embd = meta.uint("embedding_length", low=1, high=MAX_WIDTH)
    trained_ctx = meta.uint("context_length", low=1)
    n_head = meta.per_layer("attention.head_count", n_layer_all, 0, high=MAX_HEADS)
    n_head_kv = meta.per_layer("attention.head_count_kv", n_layer_all, n_head, high=MAX_HEADS)
    for il, (heads, kv_heads) in enumerate(zip(n_head, n_head_kv, strict=True)):
        if heads and kv_heads and heads % kv_heads:  # ggml's attention cannot share them
            raise meta.fail(
                f"{meta.arch}.attention.head_count_kv",
                f"is {kv_heads:,} at layer {il}, which does not divide its {heads:,} query "
                "heads: llama.cpp shares each KV head among a whole number of query heads",
            )
    n_ff = meta.per_layer("feed_forward_length", n_layer_all, 0, high=MAX_WIDTH)
    head_k = head_v = 0
    if n_head[0] > 0:
        head_k = meta.uint("attention.key_length", n_embd // n_head[0], high=MAX_HEAD_DIM)
        head_v = meta.uint("attention.value_length", n_embd // n_head[0], high=MAX_HEAD_DIM)
    return Hparams(
        n_layer_all=n_layer_all,
        n_layer=n_layer_all - n_nextn,
        n_embd=n_embd,
        trained_ctx=trained_ctx,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        head_k=head_k,
        head_v=head_v,
        head_k_swa=meta.uint("attention.key_length_swa", head_k, high=MAX_HEAD_DIM),
        head_v_swa=meta.uint("attention.value_length_swa", head_v, high=MAX_HEAD_DIM),
    )


def _vocab_size(header: GgufHeader, meta: ArchKeys) -> int | None:
    """Tokens in the vocabulary: the token list's length, else ``{arch}.vocab_size``."""
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, (list, LazyArray)):
        return len(tokens)
    if isinstance(meta.get("vocab_size"), int):
        return meta.uint("vocab_size", high=MAX_VOCAB)
    return None


def _widest_ff(meta: ArchKeys, n_ff: list[int]) -> int:
    """The widest feed-forward a token passes through: dense, or its routed experts together."""
    widest = max(n_ff, default=0)
    experts_used = meta.optional_int("expert_used_count", high=MAX_EXPERTS)
    expert_ff = meta.optional_int("expert_feed_forward_length", high=MAX_WIDTH)
    if experts_used is not None and expert_ff is not None:
        shared = meta.uint("expert_shared_feed_forward_length", 0, high=MAX_WIDTH)
        widest = max(widest, experts_used * expert_ff + shared)
    return widest


def _unverified_note(arch: str) -> str:
    return (
        f"the memory rules for {arch!r} follow llama.cpp's source but were not yet "
        "checked against a running llama-server: treat the KV figure as unverified"
    )
