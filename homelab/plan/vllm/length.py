"""Which ``--max-model-len`` a vLLM plan takes, or why vLLM would refuse it.

Two pools matter: the one vLLM will have (``pool``), against which vLLM's own check
runs, and the one homelab plans lengths into (``planned``). On a GPU whose pool vLLM
measures, ``planned`` keeps an estimate margin free; where the pool is handed to vLLM
(``--kv-cache-memory-bytes``: the CPU backend, or an explicit KV cache memory) both are
the same and the refusal is vLLM's own, number for number
(:mod:`homelab.plan.vllm.refusal`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from homelab.errors import DoesNotFitError, UsageError
from homelab.plan.vllm.config import ModelConfig
from homelab.plan.vllm.kv import KvLayout
from homelab.plan.vllm.refusal import refusal
from homelab.plan.workload import Workload
from homelab.units import format_bytes

MIN_MODEL_LEN = 4096
"""Below this a conversation is not worth serving: the plan says it does not fit."""
MAX_SEQS = 16
"""Default cap on --max-num-seqs: on one home card more streams only divide the same cache."""


@dataclass(frozen=True, slots=True)
class LengthAsk:
    """What the length is chosen from."""

    model: ModelConfig
    workload: Workload
    layout: KvLayout
    asked: int | None
    model_max: int
    wanted: int
    force: bool = False


def round_to_block(tokens: int, layout: KvLayout) -> int:
    """Whole blocks only: a partial block costs a whole one anyway."""
    return (
        tokens // layout.block_size * layout.block_size if tokens >= layout.block_size else tokens
    )


def most_in_pool(layout: KvLayout, pool: int, length: int, batched: int) -> int:
    """Full-length requests a fixed pool holds at once (1 to MAX_SEQS)."""
    return max(1, min(MAX_SEQS, batched, math.floor(layout.max_concurrency(pool, length))))


def choose_len(ask: LengthAsk, pool: int, planned: int, where: str, warnings: list[str]) -> int:
    """The asked-for length if vLLM takes it (else refuse, or with ``force`` warn), or the
    workload's, or the longest that fits ``planned``.

    Raises:
        UsageError: a length beyond the model's config.
        DoesNotFitError: vLLM would refuse the asked length (``force`` unset), or not even
            the least worth serving fits.
    """
    layout, model = ask.layout, ask.model
    exact = pool == planned
    longest = layout.longest_fitting(planned, ask.model_max)
    if ask.asked is not None:
        asked = ask.asked
        if asked > ask.model_max:
            raise UsageError(
                f"--max-model-len {asked:,} is beyond the {ask.model_max:,} tokens {model.name}'s config "
                "allows; vLLM refuses it",
                hint=f"Use a context of at most {ask.model_max} tokens.",
            )
        refused = refusal(layout, pool, asked)
        if refused is not None and ask.force:
            warnings.append(
                f"Started anyway (forced), though vLLM will refuse it: {refused.message}"
            )
            return asked
        if refused is not None:
            raise refused if exact else too_long(asked, layout, pool, longest, where, "")
        if not layout.fits(asked, planned):
            warnings.append(
                f"--max-model-len {asked:,} fits only within homelab's {format_bytes(pool - planned)} "
                "estimate margin: vLLM's own measurement may still refuse it "
                f"(a context of {round_to_block(longest, layout)} tokens keeps the margin)."
            )
        return asked
    if layout.fits(ask.wanted, planned):
        return ask.wanted
    chosen = round_to_block(longest, layout)
    least = min(MIN_MODEL_LEN, ask.wanted)
    if chosen < least:
        if exact and (refused := refusal(layout, pool, least)) is not None:
            raise refused
        raise too_long(
            least,
            layout,
            planned,
            longest,
            where,
            f" (the least worth serving for the {ask.workload.name} workload)",
        )
    return chosen


def too_long(
    length: int, layout: KvLayout, pool: int, longest: int, where: str, workload_note: str
) -> DoesNotFitError:
    """The refusal on a GPU whose pool vLLM measures: homelab's estimate, margin kept."""
    need = layout.request_bytes(length)
    usable = max(pool - layout.bytes_per_block, 0)
    fits = round_to_block(longest, layout)
    hint = (
        f"What fits: a context of {fits} tokens"
        + (" (or cache type fp8 for about twice that)" if layout.element_bytes > 1 else "")
        if fits > 0
        else "Nothing fits: use a smaller or quantized model, or cache type fp8."
    )
    return DoesNotFitError(
        f"--max-model-len {length:,}{workload_note} needs {format_bytes(need)} of KV cache for one request "
        f"({layout.blocks_per_request(length):,} blocks × {layout.bytes_per_block:,} B); {where} is "
        f"{format_bytes(usable)} after the weights and scratch — vLLM would refuse it after loading",
        hint=hint,
    )
