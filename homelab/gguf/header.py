"""The parsed GGUF header: metadata key/values and tensor infos, never tensor data.

These are the values the reader (``homelab.gguf.reader``) produces and the arch
rules (``homelab.gguf.geometry``) consume.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from homelab.gguf.tensor_info import TensorInfo
from homelab.gguf.tensor_table import TensorTable, as_table

__all__ = ["GgufHeader", "GgufModel", "LazyArray", "TensorInfo"]


@dataclass(frozen=True, slots=True)
class LazyArray:
    """A big metadata array (e.g. a 150k-token vocabulary) kept as a count, not decoded.

    Only its length matters for planning (``len(header.metadata["tokenizer.ggml.tokens"])``).
    """

    item_type: int
    """GGUF value type of the items (``gguf.GGUFValueType``)."""
    count: int
    offset: int
    """Absolute byte offset in the file of the first item."""

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True, slots=True)
class GgufHeader:
    """Everything before the tensor data of one GGUF file."""

    source_name: str
    """Path or URL the header was read from (for messages)."""
    version: int
    metadata: dict[str, Any]
    """Key -> value. Scalars are int/float/bool/str; arrays are lists, or ``LazyArray``."""
    tensors: Sequence[TensorInfo]
    """In file order; a :class:`~homelab.gguf.tensor_table.TensorTable` (one given as a
    tuple, by hand, becomes one)."""
    alignment: int
    header_bytes: int
    """Bytes from the start of the file to the end of the tensor infos."""
    data_offset: int
    """Start of the tensor data section (``header_bytes`` rounded up to ``alignment``)."""
    file_size: int | None = None
    """Total size of the file when the source knows it."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.tensors, TensorTable):
            object.__setattr__(self, "tensors", as_table(self.tensors))

    @property
    def table(self) -> TensorTable:
        """The tensor infos in columns and block groups."""
        return as_table(self.tensors)

    @property
    def arch(self) -> str | None:
        """``general.architecture``, or ``None`` when the file does not say."""
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def weights_bytes(self) -> int | None:
        """Sum of the tensors' exact data bytes; ``None`` if any tensor's type is unknown."""
        return self.table.weights_bytes


@dataclass(frozen=True, slots=True)
class GgufModel:
    """A model as llama.cpp loads it: one GGUF file, or every part of a split model."""

    parts: tuple[GgufHeader, ...]
    """The first part carries the model's metadata; later parts add tensors."""

    @property
    def header(self) -> GgufHeader:
        """The first part (metadata lives here)."""
        return self.parts[0]

    @property
    def metadata(self) -> dict[str, Any]:
        return self.parts[0].metadata

    @property
    def arch(self) -> str | None:
        return self.parts[0].arch

    @property
    def tensors(self) -> Sequence[TensorInfo]:
        """Every part's tensors, in file order, part 1 first."""
        if len(self.parts) == 1:  # the usual case: no copy of a 40,000-tensor table
            return self.parts[0].tensors
        return tuple(t for part in self.parts for t in part.tensors)

    @property
    def weights_bytes(self) -> int | None:
        """Exact tensor data bytes over every part; ``None`` if any part cannot say."""
        total = 0
        for part in self.parts:
            part_bytes = part.weights_bytes
            if part_bytes is None:
                return None
            total += part_bytes
        return total
