"""A preset's own facts: the geometry and sizes its maths needs, as data.

A preset's ``[facts]`` table lets homelab judge it at once and offline, before any
header has been read. The geometry keys are the GGUF metadata keys llama.cpp's
converter writes for the preset's ``arch``, without the ``ARCH.`` prefix (a TOML
sub-table or dotted key is the same thing); each quant the preset offers may give its
sizes::

    [facts]
    vocab = 248320                      # tokenizer.ggml.tokens (its length)
    block_count = 32
    context_length = 262144             # trained context
    embedding_length = 4096
    attention.head_count = 16
    attention.head_count_kv = 4         # or one value per layer: [0, 0, 0, 4, ...]
    attention.key_length = 256
    attention.value_length = 256
    full_attention_interval = 4
    ssm.state_size = 128                # recurrent state, sliding window: as the GGUF says

    [facts.quants.Q4_K_M]
    file_bytes = 5629108736             # the .gguf's size
    embedding_bytes = 593000000         # token_embd (stays in host memory)
    output_bytes = 815000000            # output head; 0 = tied to the embedding
    experts_bytes = 17553162240         # MoE: the routed experts (blk.N.ffn_*_exps), all
                                        # blocks together, or one value per block

From these, :func:`stand_in` builds a :class:`~homelab.gguf.header.GgufModel` in memory
that the planner reads exactly as a real header: the metadata as given, and one tensor
of the stated bytes for the embedding, the output head and each block (the blocks share
what is left of the file evenly), and for a MoE one routed-expert tensor per block with
its experts' bytes, so the offload ladder (:mod:`homelab.plan.experts_rung`) can keep
them in system RAM as it would a real file's. A MoE preset without ``experts_bytes`` (an
older file) plans without the ladder, and says so (:func:`lacks_expert_bytes`). A real
header, once read, replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from homelab.gguf.header import GgufHeader, GgufModel, LazyArray, TensorInfo
from homelab.gguf.plausible import MAX_LAYERS

QUANT_FIELDS = ("file_bytes", "embedding_bytes", "output_bytes")
EXPERTS_FIELD = "experts_bytes"
"""Optional per quant: the routed experts' bytes (older presets do not give them)."""
_I8 = (24, "I8")
"""ggml type I8: one byte per element, so a tensor of N elements is N bytes."""
_STRING = 8
"""GGUF value type of the vocabulary's items."""


class FactsProblem(ValueError):
    """A ``[facts]`` table breaks the schema; ``key`` is the dotted key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


@dataclass(frozen=True, slots=True)
class QuantSizes:
    """One quant's file, in bytes."""

    file_bytes: int
    embedding_bytes: int
    output_bytes: int
    """0 when the output head is tied to the embedding (llama.cpp loads a copy of it)."""
    experts: tuple[int, ...] | None = None
    """Each block's routed-expert bytes; None when the preset does not say (not 0: unknown)."""


@dataclass(frozen=True, slots=True)
class PresetFacts:
    """The validated ``[facts]`` of one preset."""

    arch: str
    vocab: int
    metadata: Mapping[str, int | tuple[int, ...]]
    """``ARCH.``-less key -> value (an int, or one int per layer)."""
    quants: Mapping[str, QuantSizes]

    @property
    def block_count(self) -> int:
        value = self.metadata["block_count"]
        assert isinstance(value, int)
        return value

    @property
    def is_moe(self) -> bool:
        """The geometry has routed experts (``expert_count`` above 0)."""
        count = self.metadata.get("expert_count", 0)
        return bool(max(count) if isinstance(count, tuple) else count)


def lacks_expert_bytes(facts: PresetFacts, quant: str) -> bool:
    """A MoE preset whose facts for ``quant`` do not say its routed experts' bytes: planned
    from them, the experts cannot be kept in system RAM (the ladder has nothing to move)."""
    sizes = facts.quants.get(quant)
    return facts.is_moe and sizes is not None and sizes.experts is None


def parse_facts(data: Any, arch: str | None, quants: tuple[str, ...]) -> PresetFacts:
    """Check a ``[facts]`` table (as ``tomllib`` gives it) and type it.

    Raises:
        FactsProblem: naming the key (``facts.block_count``, ``facts.quants.Q4_K_M``...).
    """
    if arch is None:
        raise FactsProblem("arch", "a preset with [facts] must name its arch")
    if not isinstance(data, Mapping):
        raise FactsProblem("facts", "must be a table")
    flat = _flatten(data, "")
    raw_quants = flat.pop("quants", None)
    vocab = flat.pop("vocab", None)
    if not _is_count(vocab) or vocab == 0:
        raise FactsProblem("facts.vocab", "must be the vocabulary's size, a positive integer")
    metadata: dict[str, int | tuple[int, ...]] = {}
    for key, value in flat.items():
        metadata[key] = _value(value, f"facts.{key}")
    blocks = metadata.get("block_count")
    if not isinstance(blocks, int) or blocks == 0:
        raise FactsProblem("facts.block_count", "must be the number of layers, a positive integer")
    if blocks > MAX_LAYERS:  # checked before a stand-in header of that many blocks is built
        raise FactsProblem(
            "facts.block_count", f"is {blocks:,}: no model has more than {MAX_LAYERS:,} layers"
        )
    for key, value in metadata.items():
        if isinstance(value, tuple) and len(value) != blocks:
            raise FactsProblem(
                f"facts.{key}", f"has {len(value)} values; block_count says {blocks} layers"
            )
    leading = metadata.get("leading_dense_block_count", 0)
    dense = leading if isinstance(leading, int) else 0
    return PresetFacts(arch, vocab, metadata, _quants(raw_quants, quants, blocks, dense))


def stand_in(facts: PresetFacts, quant: str, source_name: str) -> GgufModel:
    """A model header built from ``facts`` for ``quant``, planned like a real one.

    Raises:
        KeyError: the facts give no sizes for ``quant`` (see :attr:`PresetFacts.quants`).
    """
    sizes = facts.quants[quant]
    metadata: dict[str, Any] = {
        "general.architecture": facts.arch,
        "tokenizer.ggml.tokens": LazyArray(item_type=_STRING, count=facts.vocab, offset=0),
    }
    for key, value in facts.metadata.items():
        metadata[f"{facts.arch}.{key}"] = list(value) if isinstance(value, tuple) else value
    blocks = facts.block_count
    rest = sizes.file_bytes - sizes.embedding_bytes - sizes.output_bytes
    named = [("token_embd.weight", sizes.embedding_bytes)]
    if sizes.output_bytes:
        named.append(("output.weight", sizes.output_bytes))
    experts = sizes.experts or (0,) * blocks
    rest -= sum(experts)
    for il in range(blocks):
        named.append((f"blk.{il}.weight", rest // blocks + (il < rest % blocks)))
        if experts[il]:  # one tensor --n-cpu-moe's pattern takes, as a real file's three are
            named.append((f"blk.{il}.ffn_up_exps.weight", experts[il]))
    tensors, offset = [], 0
    for name, n_bytes in named:
        tensors.append(TensorInfo(name, (n_bytes,), _I8[0], _I8[1], offset, n_bytes))
        offset += n_bytes
    header = GgufHeader(
        source_name=source_name,
        version=3,
        metadata=metadata,
        tensors=tuple(tensors),
        alignment=32,
        header_bytes=0,
        data_offset=0,
        file_size=sizes.file_bytes,
    )
    return GgufModel((header,))


def _flatten(data: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``{"attention": {"head_count": 8}}`` -> ``{"attention.head_count": 8}`` (not quants)."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = prefix + str(key)
        if isinstance(value, Mapping) and dotted != "quants":
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _value(value: Any, key: str) -> int | tuple[int, ...]:
    if _is_count(value):
        return int(value)
    if isinstance(value, list) and value and all(_is_count(v) for v in value):
        return tuple(int(v) for v in value)
    raise FactsProblem(key, f"must be a non-negative integer or a list of them, not {value!r}")


def _quants(data: Any, quants: tuple[str, ...], blocks: int, dense: int) -> dict[str, QuantSizes]:
    if data is None:
        raise FactsProblem("facts.quants", "missing: give at least the default quant's sizes")
    if not isinstance(data, Mapping):
        raise FactsProblem("facts.quants", "must be a table of quant -> sizes")
    if quants and quants[0] not in data:
        raise FactsProblem(f"facts.quants.{quants[0]}", "missing: the default quant's sizes")
    typed: dict[str, QuantSizes] = {}
    for quant, sizes in data.items():
        where = f"facts.quants.{quant}"
        if quant not in quants:
            raise FactsProblem(where, f"{quant!r} is not one of the preset's quants")
        if not isinstance(sizes, Mapping):
            raise FactsProblem(where, "must be a table with " + ", ".join(QUANT_FIELDS))
        unknown = sorted(set(sizes) - {*QUANT_FIELDS, EXPERTS_FIELD})
        if unknown:
            raise FactsProblem(f"{where}.{unknown[0]}", "unknown key")
        for name in QUANT_FIELDS:
            if not _is_count(sizes.get(name)):
                raise FactsProblem(f"{where}.{name}", "must be a non-negative integer (bytes)")
        file_bytes, embedding, output = (int(sizes[name]) for name in QUANT_FIELDS)
        experts = _experts(sizes.get(EXPERTS_FIELD), f"{where}.{EXPERTS_FIELD}", blocks, dense)
        if embedding + output + sum(experts or ()) >= file_bytes:
            raise FactsProblem(
                f"{where}.file_bytes",
                f"{file_bytes:,} B leaves nothing for the blocks after the embedding "
                f"({embedding:,} B), output head ({output:,} B) and routed experts "
                f"({sum(experts or ()):,} B)",
            )
        typed[quant] = QuantSizes(file_bytes, embedding, output, experts)
    return typed


def _experts(value: Any, key: str, blocks: int, dense: int) -> tuple[int, ...] | None:
    """Each block's routed-expert bytes: as listed, or a total shared evenly by the blocks
    past the leading dense ones (``leading_dense_block_count``); None when not given."""
    if value is None:
        return None
    if _is_count(value) and value > 0:
        moe = max(blocks - dense, 1)
        share = [0] * (blocks - moe) + [value // moe + (i < value % moe) for i in range(moe)]
        return tuple(share)
    if isinstance(value, list) and len(value) == blocks and all(_is_count(v) for v in value):
        return tuple(int(v) for v in value)
    raise FactsProblem(
        key,
        f"must be the routed experts' bytes: a positive integer, or {blocks} non-negative "
        f"integers (one per block), not {value!r}",
    )
