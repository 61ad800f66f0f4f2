"""What a file that is not a readable GGUF is, in words: its format, or its GGUF version."""

from __future__ import annotations

_FOREIGN = (
    (b"\x89PNG", "a PNG image"),
    (b"PK\x03\x04", "a ZIP archive (a PyTorch checkpoint?)"),
    (b"version https://git-lfs", "a Git LFS pointer, not the model itself (run `git lfs pull`)"),
    (b"<!DOCTYPE", "an HTML page (a failed download?)"),
    (b"<html", "an HTML page (a failed download?)"),
    (b"lmgg", "a pre-GGUF GGML file (convert it to GGUF)"),
    (b"fmgg", "a pre-GGUF GGMF file (convert it to GGUF)"),
    (b"tjgg", "a pre-GGUF GGJT file (convert it to GGUF)"),
)


def describe_foreign(head: bytes) -> str:
    """Say what a non-GGUF file looks like: its first bytes, and its format when obvious."""
    for prefix, what in _FOREIGN:
        if head.startswith(prefix):
            return f"it looks like {what}"
    first = head[:8]
    return f"it starts with bytes {first.hex(' ')} ({first!r}) instead of 'GGUF'"


def version_problem(version: int, raw: bytes) -> tuple[str, str | None]:
    """The message and hint for a version field we cannot read."""
    swapped = int.from_bytes(raw, "big")
    if swapped in (1, 2, 3):
        big_endian = (
            f"this is a big-endian GGUF (version {swapped}, byte-swapped); homelab "
            "and llama.cpp on this machine read little-endian files only"
        )
        return big_endian, "Download the little-endian build of the model."
    if version == 1:
        return (
            "this is a GGUF version 1 file (2023, 32-bit counts), which homelab does not read",
            "Convert the model again with a current llama.cpp.",
        )
    return (
        f"unsupported GGUF version {version} (homelab reads versions 2 and 3)",
        "A newer homelab may read it.",
    )
