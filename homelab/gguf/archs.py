"""Per-architecture memory rules, read from llama.cpp's model loader.

Each rule says how an architecture lays out its memory: plain KV, KV with
sliding-window layers, MLA (K only), hybrid attention + recurrent layers, or
purely recurrent; and which metadata decides each layer. The rules mirror
llama.cpp at the version homelab builds (``src/llama-model.cpp`` ``create_memory``
and ``src/models/<arch>.cpp`` ``load_arch_hparams``).

``verified`` marks the architectures whose rules a test checks byte for byte
against the real llama-server's ``llama_kv_cache: size =`` log line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Memory = Literal["kv", "hybrid", "recurrent"]
SwaKind = Literal["pattern", "all_attention"]
RecurrentRule = Literal["interval", "no_kv_heads", "no_kv_heads_no_ff"]
HybridFilter = Literal["default", "qwen", "nemotron", "both"]


def _no_reuse(_meta: Mapping[str, Any], _arch: str, _n_layer_all: int) -> int | None:
    return None


def _gemma3n_reuse(_meta: Mapping[str, Any], _arch: str, _n_layer_all: int) -> int | None:
    return 20


def _gemma4_reuse(meta: Mapping[str, Any], arch: str, n_layer_all: int) -> int | None:
    shared = meta.get(f"{arch}.attention.shared_kv_layers", 0)
    return n_layer_all - shared if isinstance(shared, int) and shared > 0 else None


@dataclass(frozen=True, slots=True)
class ArchRule:
    """How one architecture keeps memory."""

    memory: Memory = "kv"
    swa: SwaKind | None = None
    """None: no sliding-window layers. "pattern": sliding_window_pattern (int or bool array)."""
    swa_pattern: int = 1
    """Default n_pattern when the file has no sliding_window_pattern key."""
    swa_default_window: int | None = None
    """Default sliding window when the key is absent (None: the key is required)."""
    swa_needs_window: bool = False
    """SWA is on only when sliding_window is present and > 0 (gemma3, lfm2)."""
    mla: bool = False
    recurrent: RecurrentRule | None = None
    hybrid_filter: HybridFilter = "default"
    kv_from_start: Callable[[Mapping[str, Any], str, int], int | None] = _no_reuse
    """First layer that reuses earlier layers' KV instead of owning one (gemma3n/gemma4)."""
    verified: bool = False


_DENSE = ArchRule()
_DENSE_VERIFIED = ArchRule(verified=True)
_QWEN_HYBRID = ArchRule(memory="hybrid", recurrent="interval", hybrid_filter="qwen", verified=True)
_NEMOTRON_HYBRID = ArchRule(
    memory="hybrid", recurrent="no_kv_heads_no_ff", hybrid_filter="nemotron", verified=True
)

RULES: dict[str, ArchRule] = {
    # plain full attention
    "llama": _DENSE_VERIFIED,
    "mistral3": _DENSE_VERIFIED,
    "qwen2": _DENSE_VERIFIED,
    "qwen3": _DENSE_VERIFIED,
    "qwen3moe": _DENSE_VERIFIED,
    "phi3": _DENSE_VERIFIED,  # phi3 explicitly disables SWA even when the key is present
    "qwen2moe": _DENSE_VERIFIED,
    "gemma": _DENSE,
    "granite": _DENSE,
    "granitemoe": _DENSE,
    "starcoder2": _DENSE,
    "glm4": _DENSE,
    "glm4moe": _DENSE_VERIFIED,  # NextN/MTP blocks keep no KV in the main context
    "smollm3": _DENSE,
    "seed_oss": _DENSE,
    "olmoe": _DENSE,
    "ernie4_5": _DENSE,
    "ernie4_5-moe": _DENSE,
    # sliding window
    "gemma2": ArchRule(swa="pattern", swa_pattern=2, swa_default_window=4096, verified=True),
    "gemma3": ArchRule(
        swa="pattern", swa_pattern=6, swa_default_window=0, swa_needs_window=True, verified=True
    ),
    "gpt-oss": ArchRule(swa="pattern", swa_pattern=2, verified=True),
    "cohere2": ArchRule(swa="pattern", swa_pattern=4),
    "exaone4": ArchRule(swa="pattern", swa_pattern=4, swa_default_window=0, swa_needs_window=True),
    "gemma3n": ArchRule(swa="pattern", swa_pattern=5, kv_from_start=_gemma3n_reuse),
    "gemma4": ArchRule(swa="pattern", swa_pattern=1, kv_from_start=_gemma4_reuse),
    # MLA: K only
    "deepseek2": ArchRule(mla=True, verified=True),
    # hybrid attention + recurrent
    "qwen3next": _QWEN_HYBRID,
    "qwen35": _QWEN_HYBRID,
    "qwen35moe": _QWEN_HYBRID,
    "granitehybrid": ArchRule(memory="hybrid", recurrent="no_kv_heads", verified=True),
    "nemotron_h": _NEMOTRON_HYBRID,
    "nemotron_h_moe": _NEMOTRON_HYBRID,
    "lfm2": ArchRule(
        memory="hybrid",
        recurrent="no_kv_heads",
        swa="all_attention",
        swa_default_window=0,
        swa_needs_window=True,
        verified=True,
    ),
    "lfm2moe": ArchRule(memory="hybrid", recurrent="no_kv_heads", verified=True),  # no SWA key read
    "falcon-h1": ArchRule(memory="hybrid", hybrid_filter="both"),
    # purely recurrent
    "mamba": ArchRule(memory="recurrent"),
    "mamba2": ArchRule(memory="recurrent"),
}


def rule_for(arch: str) -> ArchRule | None:
    """The memory rule for an architecture name as GGUF spells it, or None if unknown."""
    return RULES.get(arch)


def known_architectures() -> list[str]:
    """Every architecture homelab can size, sorted."""
    return sorted(RULES)
