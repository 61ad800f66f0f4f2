"""Does a byte count match a MiB figure llama-server logged (to its two decimals)? And the
logged buffers summed."""

from __future__ import annotations

from homelab.engine.llamacpp.log import LoadLog, mib_byte_range


def mib_matches(n_bytes: int, mib: float, *, single_precision: bool = False) -> bool:
    """True when ``n_bytes`` is consistent with the logged ``mib`` figure."""
    lo, hi = mib_byte_range(mib, single_precision=single_precision)
    return lo <= n_bytes <= hi


def mibs_match(n_bytes: int, mibs: list[float]) -> bool:
    """True when ``n_bytes`` is consistent with the sum of several logged figures (each
    rounded on its own: an iSWA model's two KV caches on one device)."""
    ranges = [mib_byte_range(mib) for mib in mibs]
    return bool(ranges) and sum(lo for lo, _ in ranges) <= n_bytes <= sum(hi for _, hi in ranges)


def buffer_mib(log: LoadLog, kind: str, device: str | None = None) -> float:
    """Sum of the logged ``kind`` buffers (optionally of one device), in MiB."""
    return sum(b.mib for b in log.buffers if b.kind == kind and device in (None, b.device))
