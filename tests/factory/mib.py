"""Does a byte count match a MiB figure llama-server logged (to its two decimals)? And the
logged buffers summed."""

from __future__ import annotations

from homelab.engine.llamacpp.log import LoadLog, mib_byte_range


def mib_matches(n_bytes: int, mib: float, *, single_precision: bool = False) -> bool:
    """True when ``n_bytes`` is consistent with the logged ``mib`` figure."""
    lo, hi = mib_byte_range(mib, single_precision=single_precision)
    return lo <= n_bytes <= hi


def buffer_mib(log: LoadLog, kind: str, device: str | None = None) -> float:
    """Sum of the logged ``kind`` buffers (optionally of one device), in MiB."""
    return sum(b.mib for b in log.buffers if b.kind == kind and device in (None, b.device))
