"""A whole bench: what was asked, each level's figures, the verdict, and the ``--json`` form.

The ``--json`` contract (times in seconds, rates in tokens per second, None: unknown)::

    {"results": [{"concurrency": c, "requests": n,
                  "ttft_s": {"p50", "p90", "p99"}, "prefill_tps": {"p50"},
                  "decode_tps": {"p50"}, "itl_s": {"p50", "p99"}, "cache_reuse": r,
                  ...}],
     "recommendation": {"max_concurrent", "slots", "limit", "reason", ...},
     ...}

Each result also carries ``complete``, ``planned``, ``wall_s``, ``prompt_tokens``,
``prefill_s`` (the engine's own prefill time, p50/p90/p99), ``decode_tps_aggregate``,
``deferred``, ``ttft_by_turn`` and, when a gate runs, ``gate`` (the same level measured
through the gate: its ``requests`` and ``ttft_s``). The top level also says what was
asked (``workload``, ``prompt_tokens``, ``max_tokens``, ``turns``, ``concurrency``), where
(``engine_url``, ``gate_url``), the engine (``engine_version``, ``slots``, ``ctx_per_slot``),
and whether it ran to the end (``complete``; ``stopped``: ``time limit``/``cancelled``/
an error's title).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from homelab.measure.levels import LevelResult
from homelab.measure.verdict import Recommendation


@dataclass(frozen=True, slots=True)
class BenchReport:
    engine_url: str
    gate_url: str | None
    workload: str
    prompt_tokens: int
    max_tokens: int
    turns: int
    concurrency: tuple[int, ...]
    levels: tuple[LevelResult, ...]
    gate_levels: tuple[LevelResult, ...]
    recommendation: Recommendation
    stopped: str | None
    """None: every level ran; else why it stopped early."""
    engine_version: str | None
    model_path: str | None
    slots: int | None
    ctx_per_slot: int | None
    started_at: float
    """Wall-clock start (seconds since the epoch)."""
    elapsed_s: float

    @property
    def complete(self) -> bool:
        return self.stopped is None

    def gate_level(self, concurrency: int) -> LevelResult | None:
        return next((g for g in self.gate_levels if g.concurrency == concurrency), None)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object (see the module docstring)."""
        return {
            "results": [self._result(level) for level in self.levels],
            "recommendation": self.recommendation.to_dict(),
            "complete": self.complete,
            "stopped": self.stopped,
            "workload": self.workload,
            "prompt_tokens": self.prompt_tokens,
            "max_tokens": self.max_tokens,
            "turns": self.turns,
            "concurrency": list(self.concurrency),
            "engine_url": self.engine_url,
            "gate_url": self.gate_url,
            "engine_version": self.engine_version,
            "model_path": self.model_path,
            "slots": self.slots,
            "ctx_per_slot": self.ctx_per_slot,
            "started_at": self.started_at,
            "elapsed_s": self.elapsed_s,
        }

    def _result(self, level: LevelResult) -> dict[str, Any]:
        """One level in the ``--json`` shape, with the same level through the gate."""
        gate = self.gate_level(level.concurrency)
        return {
            "concurrency": level.concurrency,
            "requests": level.requests,
            "ttft_s": level.ttft_s.pick("p50", "p90", "p99"),
            "prefill_tps": level.prefill_tps.pick("p50"),
            "decode_tps": level.decode_tps.pick("p50"),
            "itl_s": level.itl_s.pick("p50", "p99"),
            "cache_reuse": level.cache_reuse,
            "complete": level.complete,
            "planned": level.planned,
            "wall_s": level.wall_s,
            "prompt_tokens": level.prompt_tokens,
            "prefill_s": level.prefill_s.pick("p50", "p90", "p99"),
            "decode_tps_aggregate": level.decode_tps_aggregate,
            "deferred": level.deferred,
            "ttft_by_turn": list(level.ttft_by_turn),
            "gate": None
            if gate is None
            else {
                "requests": gate.requests,
                "complete": gate.complete,
                "ttft_s": gate.ttft_s.pick("p50", "p90", "p99"),
            },
        }
