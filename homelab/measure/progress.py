"""Events a running bench publishes, for front-ends to show progress (plain data)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.measure.levels import LevelResult
    from homelab.measure.report import BenchReport


@dataclass(frozen=True, slots=True)
class BenchStarted:
    engine_url: str
    gate_url: str | None
    levels: tuple[int, ...]
    time_limit_s: float


@dataclass(frozen=True, slots=True)
class LevelStarted:
    concurrency: int
    via: str
    """``engine`` or ``gate``."""
    planned: int


@dataclass(frozen=True, slots=True)
class RequestDone:
    concurrency: int
    via: str
    done: int
    planned: int
    ttft_s: float


@dataclass(frozen=True, slots=True)
class LevelDone:
    result: LevelResult
    via: str


@dataclass(frozen=True, slots=True)
class BenchFinished:
    report: BenchReport


BenchEvent = BenchStarted | LevelStarted | RequestDone | LevelDone | BenchFinished
Listener = Callable[[BenchEvent], None]
