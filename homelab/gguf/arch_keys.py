"""Typed access to an architecture's ``{arch}.*`` GGUF metadata keys.

Every read checks the value's type and that it lies in what a real model has (the bounds
in :mod:`homelab.gguf.plausible`), and an error names the file and the key, so a corrupt
or hostile header stops with a message instead of sizing a cache from garbage.
"""

from __future__ import annotations

from typing import Any

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader, LazyArray
from homelab.gguf.plausible import MAX_COUNT, REDOWNLOAD_HINT


class ArchKeys:
    """Typed access to ``{arch}.*`` keys with the file named in every error."""

    def __init__(self, header: GgufHeader, arch: str) -> None:
        self.header = header
        self.arch = arch
        self.values: dict[str, Any] = header.metadata

    def fail(self, key: str, why: str) -> ModelFileError:
        """The error for the full key name ``key``, naming the file and what is wrong."""
        message = f"{self.header.source_name}: metadata {key!r} {why}"
        return ModelFileError(message, hint=REDOWNLOAD_HINT)

    def get(self, suffix: str, default: Any = None) -> Any:
        return self.values.get(f"{self.arch}.{suffix}", default)

    def uint(
        self, suffix: str, default: int | None = None, *, high: int = MAX_COUNT, low: int = 0
    ) -> int:
        """The integer ``{arch}.{suffix}``, checked to lie in ``low..high``."""
        key = f"{self.arch}.{suffix}"
        value = self.values.get(key, default)
        if value is None:
            raise self.fail(key, "is missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"should be an integer, not {value!r}")
        return self._bounded(key, value, low, high)

    def _bounded(self, key: str, value: int, low: int, high: int) -> int:
        if value < 0:
            raise self.fail(key, f"is negative ({value:,})")
        if not low <= value <= high:
            raise self.fail(
                key, f"is {value:,}, outside what a real model has ({low:,} to {high:,})"
            )
        return value

    def optional_int(self, suffix: str, *, high: int = MAX_COUNT) -> int | None:
        """Like :meth:`uint`, but ``None`` when the key is absent."""
        if f"{self.arch}.{suffix}" not in self.values:
            return None
        return self.uint(suffix, high=high)

    def per_layer(
        self, suffix: str, n_layer_all: int, default: int | list[int], *, high: int = MAX_COUNT
    ) -> list[int]:
        """A scalar-or-array key expanded to one value per layer (llama.cpp's get_key_or_arr)."""
        key = f"{self.arch}.{suffix}"
        value = self.values.get(key, default)
        if isinstance(value, LazyArray):
            raise self.fail(key, f"is an array of {value.count} items, not one per layer")
        if isinstance(value, list):
            if len(value) != n_layer_all or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            ):
                raise self.fail(key, f"should hold {n_layer_all} integers, one per layer")
            return [self._bounded(f"{key}[{il}]", v, 0, high) for il, v in enumerate(value)]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"should be an integer or per-layer array, not {value!r}")
        return [self._bounded(key, value, 0, high)] * n_layer_all

    def bool_array(self, suffix: str, n_layer_all: int) -> list[bool] | None:
        key = f"{self.arch}.{suffix}"
        value = self.values.get(key)
        if not isinstance(value, list) or not value or not isinstance(value[0], bool):
            return None
        if len(value) > n_layer_all:
            raise self.fail(key, f"has {len(value)} entries for {n_layer_all} layers")
        return list(value) + [False] * (n_layer_all - len(value))
