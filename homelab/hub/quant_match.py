"""Which GGUF file(s) of a repository a model reference means, the way llama-server ``-hf`` picks.

Pure functions over a repo listing (no network). The rules follow llama.cpp's
``common/download.cpp``:

- A *model* GGUF is a ``.gguf`` whose file name does not contain ``mmproj``, ``imatrix``,
  ``mtp-``, ``eagle3-``, ``dflash-`` or ``dspark-`` (projectors, importance matrices and
  draft heads are not models).
- ``REPO:QUANT`` takes the first model GGUF (in path order) whose path contains
  ``QUANT`` followed by ``.`` or ``-``, case-insensitively (``q4_k_m`` finds
  ``Model-Q4_K_M.gguf`` and ``UD-Q4_K_M/Model-UD-Q4_K_M-00001-of-00002.gguf``).
- Without a quant: ``Q4_K_M``, else ``Q8_0``, else the first model GGUF.
- ``REPO/FILE.gguf`` names a file exactly (case-insensitive).
- Split models ``NAME-00001-of-00003.gguf`` are chosen by their first part and bring all
  parts with the same prefix and count.
- The vision projector: the ``mmproj`` GGUF in the model's folder or an enclosing one
  (deepest first), then the one whose quant bits are closest to the model's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from homelab.gguf.file_name import quant_tag, split_info
from homelab.hub.errors import QuantNotFoundError
from homelab.units import format_bytes

DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
"""Tried in order when the reference names no quant (as llama-server ``-hf`` does)."""

_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")


@dataclass(frozen=True)
class RemoteFile:
    """A file of a repository listing.

    Attributes:
        path: the path in the repo (``sub/Model-Q4_K_M.gguf``).
        size: bytes, or None when the listing did not say.
        sha256: the LFS sha256, or None for a plain git file (or an unknown one).
        git_oid: the git blob id (the ETag of a plain git file), or None.
    """

    path: str
    size: int | None = None
    sha256: str | None = None
    git_oid: str | None = None


@dataclass(frozen=True)
class QuantChoice:
    """One model in a repo: a single GGUF or all parts of a split one, in part order."""

    tag: str | None
    files: tuple[RemoteFile, ...]

    @property
    def primary(self) -> RemoteFile:
        """The file llama-server is given (the first part)."""
        return self.files[0]

    @property
    def size(self) -> int | None:
        """All parts together, or None if any part's size is unknown."""
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def label(self) -> str:
        """The tag, or the file name when the name carries no tag."""
        return self.tag or self.primary.path


@dataclass(frozen=True)
class Selection:
    """What to download for a reference: the model's files and, if wanted and present, a projector."""

    model: QuantChoice
    mmproj: RemoteFile | None

    @property
    def files(self) -> tuple[RemoteFile, ...]:
        """Model parts first, then the projector."""
        return self.model.files + ((self.mmproj,) if self.mmproj else ())


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def quant_bits(tag: str | None) -> int:
    """Bits per weight a tag names (``Q4_K_M`` → 4, ``BF16`` → 16); 0 when it names none."""
    match = re.search(r"[0-9]+", tag or "")
    return int(match.group(0)) if match else 0


def is_model_gguf(path: str) -> bool:
    """A GGUF holding a model (not a projector, importance matrix or draft head)."""
    name = _basename(path)
    return name.lower().endswith(".gguf") and not any(word in name for word in _NOT_MODELS)


def _ordered(files: Iterable[RemoteFile]) -> list[RemoteFile]:
    return sorted(files, key=lambda f: f.path)


def _parts(files: Sequence[RemoteFile], primary: RemoteFile) -> QuantChoice:
    info = split_info(primary.path)
    assert info is not None
    if info.count <= 1:
        return QuantChoice(info.tag, (primary,))
    parts = []
    for candidate in files:
        other = split_info(candidate.path)
        if other and other.count == info.count and other.prefix == info.prefix:
            parts.append((other.index, candidate))
    return QuantChoice(info.tag, tuple(f for _, f in sorted(parts, key=lambda p: p[0])))


def available_quants(files: Iterable[RemoteFile]) -> list[QuantChoice]:
    """Every model in the listing (split parts grouped), in path order of their first part."""
    ordered = _ordered(files)
    choices = []
    for f in ordered:
        info = split_info(f.path)
        if info and is_model_gguf(f.path) and info.index == 1:
            choices.append(_parts(ordered, f))
    return choices


def _first_with_tag(files: Sequence[RemoteFile], tag: str) -> RemoteFile | None:
    pattern = re.compile(re.escape(tag) + r"[.-]", re.IGNORECASE)
    for f in files:
        info = split_info(f.path)
        if info and is_model_gguf(f.path) and info.index == 1 and pattern.search(f.path):
            return f
    return None


def find_mmproj(files: Iterable[RemoteFile], model: RemoteFile) -> RemoteFile | None:
    """The projector for ``model``: same folder or an enclosing one, deepest, then closest bits."""
    model_dirs = model.path.split("/")[:-1]
    model_bits = quant_bits(quant_tag(model.path))
    best: tuple[int, int, str] | None = None
    chosen = None
    for f in _ordered(files):
        if not f.path.lower().endswith(".gguf") or "mmproj" not in _basename(f.path).lower():
            continue
        dirs = f.path.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue
        key = (-len(dirs), abs(quant_bits(quant_tag(f.path)) - model_bits), f.path)
        if best is None or key < best:
            best, chosen = key, f
    return chosen


def describe_quants(choices: Sequence[QuantChoice]) -> list[str]:
    """``["Q4_K_M (4.58 GiB)", "Q8_0 (7.95 GiB, 2 parts)", ...]`` for messages."""
    out = []
    for choice in choices:
        extra = [format_bytes(choice.size)] if choice.size is not None else []
        if len(choice.files) > 1:
            extra.append(f"{len(choice.files)} parts")
        out.append(f"{choice.label} ({', '.join(extra)})" if extra else choice.label)
    return out


def select(
    repo: str,
    files: Iterable[RemoteFile],
    *,
    quant: str | None = None,
    filename: str | None = None,
    mmproj: bool = True,
) -> Selection:
    """The files to get for ``repo`` + ``quant`` (or an exact ``filename``).

    Raises:
        QuantNotFoundError: no model GGUF matches (the message lists the quants there are).
    """
    ordered = _ordered(files)
    choices = available_quants(ordered)
    primary: RemoteFile | None = None
    if filename is not None:
        primary = next((f for f in ordered if f.path.lower() == filename.lower()), None)
        if primary is not None and split_info(primary.path) is None:
            primary = None  # not a GGUF: nothing llama-server could load
        asked = f"file {filename}"
    elif quant is not None:
        primary = _first_with_tag(ordered, quant)
        asked = f"quant {quant}"
    else:
        for tag in DEFAULT_QUANTS:
            primary = primary or _first_with_tag(ordered, tag)
        primary = primary or (choices[0].primary if choices else None)
        asked = "any GGUF model file"
    if primary is None:
        listed = describe_quants(choices)
        if listed:
            message = f"{repo} has no {asked}; it has: {', '.join(listed)}"
            hint = f"Pick one, e.g. `homelab pull {repo}:{choices[0].label}`."
        else:
            message = f"{repo} has no GGUF model files (llama-server loads only GGUF)"
            hint = "Look for a repo with GGUF quants of this model (often named ...-GGUF)."
        raise QuantNotFoundError(message, available=[c.label for c in choices], hint=hint)
    model = _parts(ordered, primary)
    info = split_info(primary.path)
    if info is not None and len(model.files) != info.count:
        raise QuantNotFoundError(
            f"{repo} lists {len(model.files)} of the {info.count} parts of {info.prefix}",
            available=[c.label for c in choices],
            hint="The upload looks incomplete; pick another quant or ask the repo's owner.",
        )
    projector = (
        find_mmproj(ordered, model.primary) if mmproj and is_model_gguf(primary.path) else None
    )
    return Selection(model, projector)
