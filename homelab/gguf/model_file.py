"""A model as llama.cpp loads it from disk: one GGUF file, or every part of a split model.

``llama-gguf-split`` (and ``GGUFWriter`` with a split limit) writes parts named
``Name-00001-of-00003.gguf`` whose metadata carries ``split.no`` (0-based),
``split.count`` and ``split.tensors.count``. llama.cpp is given the first part and opens
the siblings by name; the first part holds the model's metadata and every part holds
some of the tensors. Planning needs all the tensors (weights bytes), so given any part
we read every part's header.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from homelab.errors import ModelFileError
from homelab.gguf.header import GgufHeader, GgufModel
from homelab.gguf.reader import read_header
from homelab.gguf.source import LocalFileSource

SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""llama.cpp's split file name, ``"%s-%05d-of-%05d.gguf"`` (``llama_split_path``)."""


def read_model(path: str | Path) -> GgufModel:
    """Read the header of the model at ``path``, and of its sibling parts if it is split.

    Any part may be given; the result's first part is always part 1 (the metadata).

    Raises:
        ModelFileError: a file is missing, unreadable or not a GGUF (see
            ``read_header``); or the model is split and its parts cannot be found
            (the name does not follow the split pattern, a part is missing) or do not
            belong together (numbering or tensor counts disagree).
    """
    path = Path(path)
    given = _read_file(path)
    count = split_count(given)
    if count <= 1:
        return GgufModel((given,))
    paths = split_part_paths(path, count)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ModelFileError(
            f"{path.name} is one of {count} parts of a split model, but "
            f"{len(missing)} part{'s are' if len(missing) > 1 else ' is'} missing from "
            f"{path.parent}: {', '.join(missing)}",
            hint="Download every part into the same folder.",
        )
    parts = tuple(given if p == path else _read_file(p) for p in paths)
    check_parts(parts, count)
    return GgufModel(parts)


def split_count(header: GgufHeader) -> int:
    """``split.count`` of a header; 1 when the file is not split.

    Raises:
        ModelFileError: ``split.count`` is present but not a positive integer.
    """
    value = header.metadata.get("split.count", 1)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelFileError(
            f"{header.source_name}: split.count is {value!r}; it must be a positive whole number"
        )
    return value


def split_part_paths(path: Path, count: int) -> list[Path]:
    """The paths of all ``count`` parts of the split model that ``path`` belongs to.

    Raises:
        ModelFileError: the name of ``path`` does not follow the split pattern, or
            says a different number of parts than the metadata.
    """
    match = SPLIT_NAME.match(path.name)
    if match is None:
        raise ModelFileError(
            f"{path} says it is one of {count} parts (split.count), but its name does not "
            "follow llama.cpp's NAME-00001-of-000NN.gguf pattern, so the other parts "
            "cannot be found",
            hint="Keep the part names that llama-gguf-split wrote.",
        )
    if int(match["count"]) != count:
        raise ModelFileError(
            f"{path.name} is named as one of {int(match['count'])} parts, but its metadata "
            f"says split.count = {count}",
            hint="The parts come from different downloads; fetch them again.",
        )
    stem = match["stem"]
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


def check_parts(parts: Sequence[GgufHeader], count: int) -> None:
    """Check that ``parts`` are all ``count`` parts of one split model, in order.

    Whoever found the parts (by file name on disk, or by a Hub repo's listing) calls this
    before treating them as one model: a name says where a part should be, only its
    metadata says what it is, and parts of two downloads can sit side by side.

    Args:
        parts: the parts' headers, part 1 first.
        count: how many parts the first part's ``split.count`` says there are.

    Raises:
        ModelFileError: a part's ``split.no``/``split.count`` disagrees with its place
            among ``parts`` (a part from another download, or out of order), or the
            parts' tensors do not add up to the first part's ``split.tensors.count``
            (a part is truncated or from another upload).
    """
    for index, part in enumerate(parts):
        number = part.metadata.get("split.no", index)
        if number != index or split_count(part) != count:
            raise ModelFileError(
                f"{part.source_name} is named as part {index + 1} of {count}, but its "
                f"metadata says split.no = {number!r} (0-based), split.count = "
                f"{part.metadata.get('split.count')!r}",
                hint="The parts come from different downloads; fetch them again.",
            )
    expected = parts[0].metadata.get("split.tensors.count")
    found = sum(len(part.tensors) for part in parts)
    if isinstance(expected, int) and not isinstance(expected, bool) and expected != found:
        raise ModelFileError(
            f"{parts[0].source_name}: the {count} parts hold {found} tensors, but "
            f"split.tensors.count says {expected}",
            hint="The parts come from different downloads; fetch them again.",
        )


def _read_file(path: Path) -> GgufHeader:
    with LocalFileSource(path) as source:
        return read_header(source)
