"""Factory of tiny GGUF files with real attention geometry, for tests.

``write_gguf(arch, path, **overrides)`` writes a model that the real
llama-server loads: random tiny weights, a ~300-token BPE vocabulary, and the
KV-relevant geometry (layer count, KV heads, head dims, sliding-window pattern,
hybrid/recurrent layout, MLA ranks) of a real model of that architecture, with
exactly the metadata keys the official converter writes.

Import it as ``from tests.factory import write_gguf`` (run pytest as
``python -m pytest`` from the repository root so the root is on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import dense, gdn, mla, moe, ssm, swa
from .base import ModelWriter, merge_geometry

_FAMILIES = (dense, swa, gdn, ssm, mla, moe)

DEFAULTS: dict[str, dict[str, Any]] = {}
_BUILDERS: dict[str, Callable[[ModelWriter, dict[str, Any]], None]] = {}
for _family in _FAMILIES:
    DEFAULTS.update(_family.DEFAULTS)
    _BUILDERS.update(_family.BUILDERS)

#: Every architecture the factory can write, in a stable order.
ARCHS: tuple[str, ...] = tuple(_BUILDERS)

#: The acceptance set: these must load in the real llama-server.
ACCEPTANCE_ARCHS: tuple[str, ...] = ("llama", "gemma3", "gpt-oss", "qwen35", "deepseek2")


def geometry(arch: str, **overrides: Any) -> dict[str, Any]:
    """The geometry ``write_gguf(arch, ...)`` would use (defaults + overrides)."""
    if arch not in _BUILDERS:
        raise KeyError(f"unknown architecture {arch!r}; known: {', '.join(ARCHS)}")
    return merge_geometry(arch, DEFAULTS[arch], overrides)


def write_gguf(
    arch: str, path: Path, *, name: str | None = "homelab-factory-tiny", **geometry_overrides: Any
) -> Path:
    """Write a tiny ``arch`` GGUF to ``path`` and return ``path``.

    ``name``: its ``general.name`` (None: the file has none).

    ``geometry_overrides`` replace the architecture's defaults (see
    :data:`DEFAULTS`; every arch also takes ``weight_type`` and ``seed``).
    """
    g = geometry(arch, **geometry_overrides)
    mw = ModelWriter(Path(path), arch, weight_type=g["weight_type"], seed=g["seed"])
    # Not the arch name: llama.cpp keys vocab quirks on general.name (a name containing
    # "phi3" requires Llama-style <s>/</s>/<unk> tokens).
    mw.general(name)
    mw.vocab()
    _BUILDERS[arch](mw, g)
    return mw.write()


__all__ = ["ACCEPTANCE_ARCHS", "ARCHS", "DEFAULTS", "geometry", "write_gguf"]
