"""The model id llama-server serves (``--alias``): a clean name, never the GGUF's path.

Without ``--alias`` llama-server (b11312, ``server-context.cpp``) names the model by
``common_params_model::get_name()``: the ``-hf`` repo, else the file's path as given, so
``/v1/models`` said ``/home/…/model.gguf`` and every agent was handed that path (Claude
Code logged ``unrecognized_model``, Codex fell back to default metadata, OpenCode's id
became ``homelab//home/…``). The id comes from the GGUF's ``general.name`` (the file's
name when it has none), with the quant the file name carries, so two quants of one model
are told apart (``SmolLM2-135M-Instruct-Q4_1``).

Sanitised for every place it goes: llama-server splits ``--alias`` at commas (and keeps
its aliases in a sorted set, so exactly one is passed); an agent puts the id in a URL
path, a TOML or YAML string, an ``provider/model`` pair (OpenCode splits at the first
``/``). So the id keeps ASCII letters, digits, ``.``, ``_`` and ``-``: anything else (a
space, a slash, a control character, a comma) becomes ``-``, accents are dropped; a name that looks like a
path keeps its last part; it is at most :data:`MAX_ID_CHARS` long. Two different files
with the same name and quant get the same id: one engine serves one model, so an id only
has to be stable and clean, and the record keeps the file's path.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath
from typing import Any

from homelab.gguf.file_name import quant_tag, split_info

MAX_ID_CHARS = 64
FALLBACK_ID = "model"
"""The id when neither the name nor the file's name leaves anything usable."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_EDGES = "-._"


def clean_id(text: str) -> str:
    """``text`` as a model id (see the module docstring); empty when nothing usable is left."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    parts = [p for p in re.split(r"[/\\]", text) if p.strip(_EDGES + " \t")]
    last = parts[-1] if parts else ""
    cleaned = _UNSAFE.sub("-", last).strip(_EDGES)
    cleaned = re.sub(r"-{2,}", "-", cleaned)
    return cleaned[:MAX_ID_CHARS].rstrip(_EDGES)


def _file_stem(path: str) -> str:
    """The file's name without ``.gguf`` and a split suffix (``-00001-of-00003``)."""
    name = PurePosixPath(path.replace("\\", "/")).name
    info = split_info(name)
    return info.prefix if info is not None else name


def served_id(metadata: dict[str, Any] | None, path: str, preset: str | None = None) -> str:
    """The id for the model at ``path`` whose GGUF metadata is ``metadata`` (None: unread).

    A preset's own name (``preset``, the key ``homelab serve KEY`` took) when one was
    served and something usable is left of it, cleaned like any id; else ``general.name``
    when it is a string with something usable in it, else the file's name; then ``-QUANT``
    when the file name carries a quant the name does not.
    """
    named = clean_id(preset) if preset is not None else ""
    if named:
        return named
    raw = (metadata or {}).get("general.name")
    base = clean_id(raw) if isinstance(raw, str) else ""
    if not base:
        base = clean_id(_file_stem(path))
    tag = quant_tag(PurePosixPath(path.replace("\\", "/")).name)
    if base and tag and tag.lower() not in base.lower():
        room = MAX_ID_CHARS - len(tag) - 1
        base = f"{base[:room].rstrip(_EDGES)}-{tag}"
    return base or FALLBACK_ID
