"""vLLM's start-up KV check, reproduced: what it refuses, and the length it then names.

vLLM 0.32 (``vllm/v1/core/kv_cache_utils.py``: ``get_kv_cache_configs``,
``_check_enough_kv_cache_memory``, ``_estimate_max_model_len_from_groups``) keeps one
block of the pool back (the null block), then refuses when one request of
``max_model_len`` tokens needs more than the rest::

    needed(L)  = bytes_per_block × Σ_groups cdiv(max bytes of the group at L, page)
    available  = pool − bytes_per_block
    refuse when needed(max_model_len) > available, naming
    the estimate = the largest L in 1..max_model_len with needed(L) ≤ available
                   (a binary search; whole blocks, so a multiple of the block size).

Both GiB figures are printed as ``round(bytes / 2**30, 2)`` (``format_gib``). The
same :func:`kv_refusal_error` is built from homelab's numbers before the boot and from
vLLM's own line after one (:mod:`homelab.engine.vllm.log`), so the two read alike.
"""

from __future__ import annotations

from homelab.errors import DoesNotFitError
from homelab.plan.vllm.kv import KvLayout
from homelab.units import GiB


def format_gib(n: int) -> str:
    """vLLM's ``format_gib``: GiB rounded to two places, as Python prints the float."""
    return f"{round(n / GiB, 2)}"


def kv_refusal_error(
    max_model_len: int, needed_gib: str, available_gib: str, estimate: int | None
) -> DoesNotFitError:
    """The refusal, in one wording whether homelab priced it or vLLM logged it."""
    named = (
        f" Based on the KV pool, vLLM's estimated maximum model length is {estimate}."
        if estimate
        else ""
    )
    hint = (
        f"Use a context of at most {estimate} tokens (the context setting), or give the KV "
        "cache more memory (the KV cache memory setting)."
        if estimate
        else "Give the KV cache more memory, or use a smaller model."
    )
    return DoesNotFitError(
        f"vLLM refuses a max-model-len of {max_model_len:,} tokens: one request needs "
        f"{needed_gib} GiB of KV cache, more than the {available_gib} GiB its pool holds.{named}",
        hint=hint,
        title="Context does not fit vLLM's KV cache",
    )


def refusal(layout: KvLayout, pool: int, max_model_len: int) -> DoesNotFitError | None:
    """vLLM's refusal of ``max_model_len`` in this pool, or None when it starts."""
    if layout.fits(max_model_len, pool):
        return None
    return kv_refusal_error(
        max_model_len,
        format_gib(layout.request_bytes(max_model_len)),
        format_gib(pool - layout.bytes_per_block),  # the check leaves out the null block
        layout.longest_fitting(pool, max_model_len),  # the length it names (0: not one token)
    )
