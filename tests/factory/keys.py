"""Read back the memory-relevant metadata of a GGUF (for tests and reports).

``memory_keys(path)`` returns the ``{arch}.*`` keys that decide KV, SWA and
recurrent-state sizes, with the ``{arch}.`` prefix removed, scalars as Python
numbers and arrays as lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf

# Suffixes (after "{arch}.") that feed the memory estimate.
MEMORY_KEYS = (
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "nextn_predict_layers",
    "leading_dense_block_count",
    "full_attention_interval",
    "expert_count",
    "expert_used_count",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attention.recurrent_layers",
    "attention.shared_kv_layers",
    "attention.kv_lora_rank",
    "attention.q_lora_rank",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "ssm.conv_kernel",
    "ssm.inner_size",
    "ssm.state_size",
    "ssm.time_step_rank",
    "ssm.group_count",
    "shortconv.l_cache",
    "rope.dimension_count",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
)


def _value(field: gguf.ReaderField) -> Any:
    """A reader field as a Python scalar, string or list."""
    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        return [field.parts[i].tolist()[0] for i in field.data]
    if kind == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def memory_keys(path: Path) -> dict[str, Any]:
    """The memory-relevant ``{arch}.*`` keys of the GGUF at ``path`` (prefix stripped)."""
    reader = gguf.GGUFReader(str(path))
    arch = _value(reader.fields["general.architecture"])
    out: dict[str, Any] = {"general.architecture": arch}
    for suffix in MEMORY_KEYS:
        field = reader.fields.get(f"{arch}.{suffix}")
        if field is not None:
            out[suffix] = _value(field)
    return out
