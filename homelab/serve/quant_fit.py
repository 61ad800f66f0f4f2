"""Which quant to pick: every GGUF model of a repo judged on this card.

Each quant (split parts grouped) is read from its header, never downloaded (the HF
cache, homelab's header cache, or range requests; see ``homelab.hub.model_ref``), and
judged with :func:`homelab.plan.judge.judge` under the same options as ``homelab plan``:
fits / partial / does not fit / unknown, the slots of the workload and the tokens that fit.

Which of them to pick is :mod:`homelab.serve.quant_rank`'s: each quant carries the bit width
that ranking weighs (its name's, else its header's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from homelab.engine.kinds import gguf_kind
from homelab.engine.llamacpp.calibrate import current_engine_version
from homelab.errors import HomelabError
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.calibration import EngineVersion
from homelab.plan.experts_rung import system_ram
from homelab.plan.judge import Fit
from homelab.plan.options import PlanOptions

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel
    from homelab.hub.header_cache import HeaderCache
    from homelab.hub.model_ref import RepoListing, ResolvedModel
    from homelab.hub.quant_match import QuantChoice

HEADER_WORKERS = 4
"""Headers read at once (each is a few round trips; a repo has ~10-25 quants)."""


@dataclass(frozen=True, slots=True)
class QuantFit:
    """One quant of the repo and its verdict on the card."""

    choice: QuantChoice
    fit: Fit
    header_origin: str | None = None
    """Where the headers came from: hf-cache, header-cache, remote (or several, joined)."""
    bytes_fetched: int = 0
    bits: int | None = None
    """Bits per weight, as the quant's name says (``Q4_K_M``: 4), else the header's (rounded
    down); None without a header."""

    @property
    def label(self) -> str:
        return self.choice.label

    @property
    def size(self) -> int | None:
        """The quant's file size(s) as the repo listing says."""
        return self.choice.size


def fit_quants(
    listing: RepoListing,
    report: GpuReport,
    options: PlanOptions,
    *,
    cache: HeaderCache | None = None,
    workers: int = HEADER_WORKERS,
    engine_version: EngineVersion = current_engine_version,
    ram: Callable[[], CpuMemory | None] = system_ram,
) -> list[QuantFit]:
    """Judge every quant of ``listing`` on the card in ``report``; smallest file first.
    ``ram`` is the system RAM a MoE quant's experts-in-RAM rung is weighed against.

    Raises:
        QuantNotFoundError: the repo has no GGUF model files.
        HubAuthError, HubNetworkError: the Hub refused or could not be reached (true of
            every quant, so the listing stops there). Other trouble with one quant (its
            header not cached offline, a bad header) gives that quant ``unknown``.
    """
    from homelab.hub.errors import QuantNotFoundError
    from homelab.hub.header_cache import HeaderCache
    from homelab.hub.model_ref import read_choice
    from homelab.hub.quant_match import available_quants

    choices = sorted(available_quants(listing.files), key=lambda c: (c.size or 0, c.label))
    if not choices:
        raise QuantNotFoundError(
            f"{listing.repo} has no GGUF model files (llama-server loads only GGUF)",
            available=[],
            hint="Look for a repo of GGUF quants (often named ...-GGUF).",
        )
    cache = cache or HeaderCache()

    def read(choice: QuantChoice) -> ResolvedModel | HomelabError:
        try:
            return read_choice(listing, choice, cache=cache)
        except HomelabError as error:
            return error

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(choices)))) as pool:
        resolved = list(pool.map(read, choices))
    return [
        _judge(choice, result, report, options, engine_version, ram)
        for choice, result in zip(choices, resolved, strict=True)
    ]


def _judge(
    choice: QuantChoice,
    resolved: ResolvedModel | HomelabError,
    report: GpuReport,
    options: PlanOptions,
    engine_version: EngineVersion,
    ram: Callable[[], CpuMemory | None],
) -> QuantFit:
    from homelab.hub.errors import HubAuthError, HubNetworkError
    from homelab.hub.quant_match import quant_bits

    if isinstance(resolved, (HubAuthError, HubNetworkError)):
        raise resolved
    if isinstance(resolved, HomelabError):
        return QuantFit(choice, gguf_kind().verdict(resolved, choice.label, report, options))
    model = resolved.model
    fit = gguf_kind().verdict(
        model, resolved.display, report, options, engine_version=engine_version, ram=ram
    )
    origins = sorted({p.origin for p in resolved.parts})
    bits = quant_bits(choice.tag) or header_bits(model)
    return QuantFit(choice, fit, "+".join(origins), resolved.bytes_fetched, bits)


def header_bits(model: GgufModel) -> int | None:
    """Whole bits per weight of the header's tensors (bytes × 8 ÷ elements, rounded down);
    None when a tensor cannot be sized."""
    total = model.weights_bytes
    elements = sum(math.prod(t.shape) for t in model.tensors)
    return None if total is None or not elements else total * 8 // elements
