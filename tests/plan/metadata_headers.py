"""GgufHeader values built straight from metadata, for pure geometry/KV tests.

The metadata keys are the ones llama.cpp's converters write for each architecture.
"""

from __future__ import annotations

from typing import Any

from homelab.gguf.header import GgufHeader, LazyArray


def header(arch: str, vocab: int = 32_000, **keys: Any) -> GgufHeader:
    """A header with ``general.architecture`` = arch and ``{arch}.<key>`` = value for each key.

    Key names use ``__`` for dots: ``attention__head_count_kv=8``.
    """
    metadata: dict[str, Any] = {
        "general.architecture": arch,
        "tokenizer.ggml.tokens": LazyArray(item_type=8, count=vocab, offset=0),
    }
    for name, value in keys.items():
        metadata[f"{arch}.{name.replace('__', '.')}"] = value
    return GgufHeader(
        source_name=f"<{arch} test header>",
        version=3,
        metadata=metadata,
        tensors=(),
        alignment=32,
        header_bytes=0,
        data_offset=0,
    )


def seed_qwen35() -> GgufHeader:
    """The seed article's 9B: 32 layers, 8 keep KV (every 4th), 4 KV heads of 256, GDN state."""
    return header(
        "qwen35",
        vocab=248_320,
        block_count=32,
        context_length=262_144,
        embedding_length=4096,
        feed_forward_length=12_288,
        attention__head_count=16,
        attention__head_count_kv=4,
        attention__key_length=256,
        attention__value_length=256,
        full_attention_interval=4,
        ssm__conv_kernel=4,
        ssm__state_size=128,
        ssm__group_count=16,
        ssm__time_step_rank=32,
        ssm__inner_size=4096,
    )


def llama31_8b() -> GgufHeader:
    return header(
        "llama",
        vocab=128_256,
        block_count=32,
        context_length=131_072,
        embedding_length=4096,
        attention__head_count=32,
        attention__head_count_kv=8,
    )


def gpt_oss_20b() -> GgufHeader:
    return header(
        "gpt-oss",
        vocab=201_088,
        block_count=24,
        context_length=131_072,
        embedding_length=2880,
        attention__head_count=64,
        attention__head_count_kv=8,
        attention__key_length=64,
        attention__value_length=64,
        attention__sliding_window=128,
    )


def gemma3_27b() -> GgufHeader:
    return header(
        "gemma3",
        vocab=262_144,
        block_count=62,
        context_length=131_072,
        embedding_length=5376,
        attention__head_count=32,
        attention__head_count_kv=16,
        attention__key_length=128,
        attention__value_length=128,
        attention__sliding_window=1024,
    )


def deepseek_v3() -> GgufHeader:
    return header(
        "deepseek2",
        vocab=129_280,
        block_count=61,
        context_length=163_840,
        embedding_length=7168,
        attention__head_count=128,
        attention__head_count_kv=1,
        attention__key_length=576,
        attention__value_length=512,
        attention__key_length_mla=192,
        attention__value_length_mla=128,
        attention__kv_lora_rank=512,
    )
