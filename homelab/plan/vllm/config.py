"""A model as vLLM will load it: its config.json and the weight files next to it.

The model is a local folder or a Hugging Face repo id already in the standard HF
cache (found with ``huggingface_hub``'s offline snapshot lookup; nothing is
downloaded). Multimodal checkpoints keep the language model under ``text_config``;
fields are read there first, then at the top level, then from the defaults
``transformers`` would fill in for that model type (Gemma 3's released configs
leave ``head_dim`` and the sliding-window pattern out).

Each layer gets a kind, because vLLM prices them differently:

- ``full``: full attention (or MLA when the config has ``kv_lora_rank``): KV per token;
- ``sliding``: sliding-window attention: KV bounded by the window;
- ``linear``: Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a fixed state per request.

The kinds come from ``layer_types``, else ``full_attention_interval`` (every n-th
layer full, the others linear), else Gemma's sliding-window pattern, else a
``sliding_window`` that applies to every layer, else all full.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from homelab.errors import ModelFileError, UnknownArchitectureError
from homelab.plan.vllm.files import WeightFiles, read_json, resolve_model_dir, weight_files

LayerKind = Literal["full", "sliding", "linear"]
_FULL: LayerKind = "full"
_SLIDING: LayerKind = "sliding"

_LAYER_TYPE_NAMES: dict[str, LayerKind] = {
    "full_attention": "full",
    "attention": "full",
    "global_attention": "full",
    "sliding_attention": "sliding",
    "local_attention": "sliding",
    "linear_attention": "linear",
}
_RECURRENT_NAMES = frozenset({"mamba", "mamba2", "conv", "kda", "recurrent"})

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    # transformers' Gemma3TextConfig defaults (configuration_gemma3.py); the released
    # gemma-3 configs only write what differs from these.
    "gemma3_text": {
        "vocab_size": 262_208,
        "head_dim": 256,
        "num_key_value_heads": 4,
        "max_position_embeddings": 131_072,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
}
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""The keys vLLM reads a model's length from (the smallest one present wins)."""


@dataclass(frozen=True, slots=True)
class Mla:
    """Multi-head latent attention (DeepSeek V2/V3 style): one latent vector per token."""

    kv_lora_rank: int
    qk_rope_head_dim: int

    @property
    def width(self) -> int:
        """Elements cached per token per layer (no separate V: it is rebuilt from the latent)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True, slots=True)
class LinearAttention:
    """Gated DeltaNet geometry: the state one request keeps per linear layer."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int
    conv_dtype_bytes: int
    ssm_dtype_bytes: int

    @property
    def conv_elements(self) -> int:
        """Convolution state: q, k and v channels over ``conv_kernel − 1`` steps."""
        channels = (
            self.key_head_dim * self.num_key_heads * 2 + self.value_head_dim * self.num_value_heads
        )
        return channels * (self.conv_kernel - 1)

    @property
    def temporal_elements(self) -> int:
        """Recurrent state: one ``key_head_dim × value_head_dim`` matrix per value head."""
        return self.num_value_heads * self.value_head_dim * self.key_head_dim

    @property
    def state_bytes(self) -> int:
        """One request's state in one linear layer (vLLM's unpadded mamba page)."""
        return (
            self.conv_elements * self.conv_dtype_bytes
            + self.temporal_elements * self.ssm_dtype_bytes
        )


@dataclass(frozen=True, slots=True)
class Moe:
    """Mixture of experts: how wide the expert part of a token's forward pass is."""

    num_experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """What pricing needs to know about a model, in plain numbers."""

    source: str
    """What the user named: a folder or a repo id."""
    directory: Path
    repo_id: str | None
    architectures: tuple[str, ...]
    model_type: str
    dtype: str | None
    """``torch_dtype``/``dtype`` as written, ``None`` when the config has none."""
    dtype_bytes: int
    """Bytes per element of what vLLM's ``auto`` picks: bf16/fp16 models stay 2; float32
    or unnamed dtypes are cast down to 16 bits on GPUs (vLLM's ``--dtype auto``)."""
    hidden_size: int
    intermediate_size: int | None
    vocab_size: int | None
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    layer_kinds: tuple[LayerKind, ...]
    sliding_window: int | None
    mla: Mla | None
    linear: LinearAttention | None
    moe: Moe | None
    max_model_len: int | None
    """The longest context the config allows (vLLM refuses more without an override)."""
    weights: WeightFiles
    notes: tuple[str, ...] = ()

    @property
    def n_layers(self) -> int:
        return len(self.layer_kinds)

    def count(self, kind: LayerKind) -> int:
        return sum(1 for k in self.layer_kinds if k == kind)

    @property
    def is_hybrid(self) -> bool:
        """Linear-attention layers next to attention layers (vLLM's ``IsHybrid``)."""
        return self.count("linear") > 0

    @property
    def name(self) -> str:
        return self.repo_id or self.directory.name


def load_model_config(model: str, *, cache_dir: Path | None = None) -> ModelConfig:
    """Read ``config.json`` and the weight sizes of a folder or cached repo.

    Raises:
        ModelFileError: no or unreadable config.json, missing fields, or weights that
            cannot be sized.
        UnknownArchitectureError: a layer type whose memory homelab cannot price.
        UsageError: see :func:`resolve_model_dir`.
    """
    directory, repo_id = resolve_model_dir(model, cache_dir=cache_dir)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelFileError(
            f"{directory} has no config.json",
            hint="vLLM needs a Hugging Face checkpoint folder (config.json + weights).",
        )
    return parse_config(
        read_json(config_path),
        source=model,
        directory=directory,
        repo_id=repo_id,
        weights=weight_files(directory),
    )


def parse_config(
    raw: dict[str, Any], *, source: str, directory: Path, repo_id: str | None, weights: WeightFiles
) -> ModelConfig:
    """Turn a config.json mapping into a :class:`ModelConfig` (see the module docstring)."""
    nested = raw.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else raw
    text_type = str(text.get("model_type") or raw.get("model_type") or "unknown")
    field = _Fields(text, raw, _TEXT_DEFAULTS.get(text_type, {}), source)
    notes: list[str] = []

    dtype = field.opt("dtype", "torch_dtype")
    dtype_bytes = 2
    if dtype is None:
        notes.append("config.json names no dtype; vLLM runs such models in 16 bits on GPUs.")
    elif str(dtype) in ("float32", "float"):
        notes.append("config.json says float32; vLLM's --dtype auto runs it in 16 bits on GPUs.")
    elif str(dtype) not in DTYPE_BYTES:
        notes.append(f"unrecognised dtype {dtype!r}; priced as 16 bits.")

    heads = field.int("num_attention_heads")
    hidden = field.int("hidden_size")
    head_dim = field.opt("head_dim") or hidden // heads
    n_layers = field.int("num_hidden_layers", "num_layers", "n_layer")
    kinds = _layer_kinds(field, text_type, n_layers, source)
    sliding = field.opt("sliding_window") if "sliding" in kinds else None

    mla = None
    if field.opt("kv_lora_rank"):
        mla = Mla(int(field.int("kv_lora_rank")), int(field.int("qk_rope_head_dim")))
    linear = None
    if "linear" in kinds:
        ssm = field.opt("mamba_ssm_dtype")
        linear = LinearAttention(
            num_key_heads=field.int("linear_num_key_heads"),
            num_value_heads=field.int("linear_num_value_heads"),
            key_head_dim=field.int("linear_key_head_dim"),
            value_head_dim=field.int("linear_value_head_dim"),
            conv_kernel=field.int("linear_conv_kernel_dim"),
            conv_dtype_bytes=dtype_bytes,
            ssm_dtype_bytes=DTYPE_BYTES.get(str(ssm), dtype_bytes) if ssm else dtype_bytes,
        )
    moe = _moe(field)
    max_len = _derived_max_len(field, f"{raw.get('model_type')} {text_type}")
    if weights.source == "index":
        notes.append("The weight shards are not downloaded; their size comes from the index file.")
    if field.opt("vocab_size") is None:
        notes.append(
            "config.json names no vocab_size; the sampler's logits are priced for 256,000 tokens."
        )
    return ModelConfig(
        source=source,
        directory=directory,
        repo_id=repo_id,
        architectures=tuple(
            str(a) for a in raw.get("architectures") or text.get("architectures") or ()
        ),
        model_type=str(raw.get("model_type") or text_type),
        dtype=None if dtype is None else str(dtype),
        dtype_bytes=dtype_bytes,
        hidden_size=hidden,
        intermediate_size=field.opt("intermediate_size"),
        vocab_size=field.opt("vocab_size"),
        num_attention_heads=heads,
        num_kv_heads=field.opt("num_key_value_heads") or heads,
        head_dim=int(head_dim),
        layer_kinds=kinds,
        sliding_window=int(sliding) if sliding else None,
        mla=mla,
        linear=linear,
        moe=moe,
        max_model_len=max_len,
        weights=weights,
        notes=tuple(notes),
    )


class _Fields:
    """Look a key up in text_config, then the top level, then the type's defaults."""

    def __init__(
        self, text: dict[str, Any], top: dict[str, Any], defaults: dict[str, Any], source: str
    ):
        self._layers = (text, top, defaults)
        self._source = source

    def opt(self, *keys: str) -> Any:
        for layer in self._layers:
            for key in keys:
                if layer.get(key) is not None:
                    return layer[key]
        return None

    def int(self, *keys: str) -> int:
        value = self.opt(*keys)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ModelFileError(
                f"config.json of {self._source} has no usable {keys[0]} ({value!r})",
                hint="homelab needs the model's geometry to price it; is this a causal language model?",
            )
        return value


def _layer_kinds(
    field: _Fields, text_type: str, n_layers: int, source: str
) -> tuple[LayerKind, ...]:
    types = field.opt("layer_types")
    if isinstance(types, list) and types:
        if len(types) != n_layers:
            raise ModelFileError(
                f"config.json of {source} lists {len(types)} layer_types for {n_layers} layers"
            )
        kinds = []
        for name in types:
            kind = _LAYER_TYPE_NAMES.get(str(name))
            if kind is None:
                what = "a recurrent state" if str(name) in _RECURRENT_NAMES else "a memory layout"
                raise UnknownArchitectureError(
                    f"{source} has {name!r} layers: {what} homelab cannot price for vLLM yet",
                    hint="Run it with llama.cpp, or give vLLM's own automatic context length "
                    "(max-model-len auto) a try by hand.",
                )
            kinds.append(kind)
        return tuple(kinds)
    interval = field.opt("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return tuple("full" if (i + 1) % interval == 0 else "linear" for i in range(n_layers))
    window = field.opt("sliding_window")
    pattern = field.opt("sliding_window_pattern")
    if window and isinstance(pattern, int) and pattern > 0:
        return tuple("full" if (i + 1) % pattern == 0 else "sliding" for i in range(n_layers))
    if window and text_type == "gemma2":
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n_layers))
    if window and field.opt("use_sliding_window") is not False:
        return (_SLIDING,) * n_layers
    return (_FULL,) * n_layers


def _derived_max_len(field: _Fields, model_types: str) -> int | None:
    """The length vLLM allows without an override (vllm/config/model.py, _get_and_verify_max_len).

    The smallest length key, stretched by a RoPE scaling factor except for su/longrope/llama3
    (whose length key already includes it) and Gemma 3 (whose length is already stretched);
    yarn stretches its original length instead.
    """
    lengths = [v for v in (field.opt(k) for k in _MAX_LEN_KEYS) if isinstance(v, int) and v > 0]
    if not lengths:
        return None
    base = min(lengths)
    rope = field.opt("rope_scaling")
    if not isinstance(rope, dict):
        rope = field.opt("rope_parameters")
    if not isinstance(rope, dict) or "gemma3" in model_types:
        return base
    params = (
        list(rope.values()) if rope and all(isinstance(v, dict) for v in rope.values()) else [rope]
    )
    stretched = []
    for rp in params:
        kind, factor = rp.get("rope_type") or rp.get("type"), rp.get("factor")
        if kind in (None, "su", "longrope", "llama3") or not isinstance(factor, (int, float)):
            continue
        original = rp.get("original_max_position_embeddings")
        stretched.append(
            (original if kind == "yarn" and isinstance(original, int) else base) * factor
        )
    return int(max(stretched)) if stretched else base


def _moe(field: _Fields) -> Moe | None:
    experts = field.opt("num_experts", "num_local_experts", "n_routed_experts")
    if not isinstance(experts, int) or experts <= 1:
        return None
    per_token = field.opt("num_experts_per_tok", "experts_per_token", "moe_topk") or 1
    width = field.opt("moe_intermediate_size") or field.opt("intermediate_size") or 0
    shared = field.opt("shared_expert_intermediate_size") or 0
    n_shared = field.opt("n_shared_experts")
    if not shared and isinstance(n_shared, int) and n_shared > 0:
        shared = n_shared * int(width)
    return Moe(experts, int(per_token), int(width), int(shared))
