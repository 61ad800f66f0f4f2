"""What a GGUF's file name says: its quant tag and, for a split model, its part.

llama.cpp's naming (``gguf-split``, ``common/download.cpp``): ``NAME-QUANT.gguf``, split
models ``NAME-00001-of-00003.gguf``. Read by the planner (the served id), the TUI's model
list and the Hub's quant choice alike, so it lives with the format, not with downloads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)
QUANT = re.compile(
    r"^(?:I?Q[0-9](?:_[A-Z0-9]+)*|TQ[0-9]_[0-9]|B?F(?:16|32)|FP(?:8|16|32)|MXFP4)$", re.IGNORECASE
)
"""A file-name tag that names a quant (``Q4_K_M``, ``IQ2_XXS``, ``BF16``, ``MXFP4``): only
these, not any last word (``model-second.gguf`` has none)."""


@dataclass(frozen=True)
class SplitInfo:
    """What a GGUF's name says: ``prefix`` (tag included, no split suffix), quant ``tag``, part."""

    prefix: str
    tag: str | None
    index: int
    count: int


def split_info(path: str) -> SplitInfo | None:
    """Prefix, quant tag and split part of a ``.gguf`` path; None for anything else. The
    path is read as written: a symlink by its own name, never its target's (a Hub cache's
    blob is named by its hash)."""
    if not path.lower().endswith(".gguf"):
        return None
    prefix = path[: -len(".gguf")]
    index = count = 1
    match = _SPLIT.match(prefix)
    if match:
        prefix, index, count = match.group(1), int(match.group(2)), int(match.group(3))
    tag_match = _TAG.search(prefix)
    tag = tag_match.group(1).upper() if tag_match else None
    if tag is not None and not QUANT.match(tag):
        tag = None
    return SplitInfo(prefix, tag, index, count)


def quant_tag(path: str) -> str | None:
    """The quant a GGUF's name carries (``Q4_K_M``, ``F16``, ``MXFP4``...), upper case; or None."""
    info = split_info(path)
    return info.tag if info else None
