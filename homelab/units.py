"""Byte sizes: parsing what people type and printing what people read.

Everything inside homelab is an ``int`` of bytes; this module is the only place
that turns bytes into ``"17.0 KiB"`` or ``"16GiB"`` into bytes.
"""

from __future__ import annotations

import re

KiB = 1024
MiB = 1024**2
GiB = 1024**3

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*([a-zA-Z]{0,3})\s*$", re.ASCII)
"""ASCII digits only (``int("²")`` and ``float("١٢")`` would otherwise be tried), at most 20
before the point: 320 digits are a typo, not a size (and overflow a float)."""


def parse_size(text: str) -> int:
    """Parse ``"16GiB"``, ``"24 GB"``, ``"512MiB"`` or ``"1000"`` into bytes.

    Raises:
        ValueError: the text is not a number (ASCII digits, at most 20 before the point)
            followed by a known unit.
    """
    match = _SIZE.match(text)
    if match is None or match.group(2).lower() not in _UNITS:
        shown = repr(text) if len(text) <= 40 else f"{text[:30]!r}... ({len(text)} characters)"
        raise ValueError(f"not a size: {shown} (try e.g. 16GiB, 24GB, 512MiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


PRECISION = 2
"""Decimals of every size a person reads, in the TUI and the CLI alike (one format: the
same figure never reads ``1.16 GiB`` in one place and ``1 GiB`` in another)."""


def format_bytes(n: int | None) -> str:
    """Binary units for people: ``format_bytes(17408) == "17.00 KiB"``; ``None`` is ``"n/a"``.
    The one formatter of sizes for people (:data:`PRECISION` decimals)."""
    if n is None:
        return "n/a"
    sign = "-" if n < 0 else ""
    value = abs(n)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size:
            return f"{sign}{value / size:.{PRECISION}f} {unit}"
    return f"{sign}{value} B"


def format_int(n: int | None) -> str:
    """Thousands separators: ``17,408``; ``None`` is ``"n/a"``."""
    return "n/a" if n is None else f"{n:,}"
