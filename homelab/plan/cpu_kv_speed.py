"""How fast llama-server's CPU backend runs each KV cache setting: measured here, or the finding.

On the CPU backend the KV cache type and flash attention set the speed of prompt processing
(prefill) far more than memory does: llama.cpp's CPU flash-attention kernel converts a
quantized K/V block to F16 for every dot product, and without flash attention a quantized V
is refused outright. A CPU plan whose person set neither therefore takes the fastest setting
that RAM allows (:mod:`homelab.plan.cpu_kv`), and this module says which is fastest.

Where the figures come from, in order:

1. ``bench/bench_cpu_kv.py --store`` measured them on this CPU (llama-server's own
   ``timings`` of a ~2,000-token prompt, per setting, in one run) and stored them in
   ``state_dir()/cpu_kv_speed.json``; a record of another CPU is not this machine's.
2. Otherwise :data:`FINDING`: measured on the pinned engine's CPU build (llama.cpp b11312,
   ``homelab engine build`` for the CPU) on a loaded 2-core machine with SmolLM2-135M Q4_1
   and a 2,000-token prompt, bare llama-server, two runs each (issue 20): q8_0 KV + FA on
   140–145 prompt tokens/s, f16 + FA on 251–258, f16 + FA off 206–224 — q8_0 costs 1.8× in
   prefill. Decode was not measured there (None).

A stored file that cannot be read as such a record is set aside (``.corrupt-<time>``, as the
calibration store's) and ignored, and the plan says so: a broken measurement never stops a
plan and never stands for one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from homelab.errors import HomelabError
from homelab.paths import state_dir
from homelab.plan.record_store import locked, read_records, write_records

FILE_NAME = "cpu_kv_speed.json"
SCHEMA = 1
BENCH = "bench/bench_cpu_kv.py"
MAX_CPUS = 16
"""Records kept, one per CPU (a state folder shared by a few machines)."""


class CpuSpeedStoreError(HomelabError):
    """The measured speeds could not be written (the state folder is not writable)."""

    title = "CPU KV speed not stored"


@dataclass(frozen=True, slots=True, order=True)
class KvSetting:
    """One KV cache setting llama-server takes: K and V cache type, flash attention."""

    cache_type: str
    flash_attn: bool

    @property
    def label(self) -> str:
        return f"{self.cache_type} + FA {'on' if self.flash_attn else 'off'}"


Q8_FA = KvSetting("q8_0", True)
F16_FA = KvSetting("f16", True)
F16_NO_FA = KvSetting("f16", False)
SETTINGS = (Q8_FA, F16_FA, F16_NO_FA)
"""The settings compared (q8_0 without flash attention: llama-server refuses a quantized V)."""


@dataclass(frozen=True, slots=True)
class Speed:
    """Tokens per second of one setting; None where it was not measured."""

    prefill: float
    decode: float | None = None


@dataclass(frozen=True, slots=True)
class CpuKvSpeeds:
    """Each setting's speed on the CPU backend, and where the figures come from."""

    speeds: Mapping[KvSetting, Speed]
    source: str
    """Said in the plan's working: the bench and when, or the finding."""
    measured_here: bool
    notes: tuple[str, ...] = field(default=())
    """Why a stored measurement was not used (said in the plan's warnings)."""

    def fastest(self) -> list[KvSetting]:
        """The settings with a figure, fastest prefill first."""
        return sorted(self.speeds, key=lambda s: (-self.speeds[s].prefill, s))

    def ratio(self, faster: KvSetting, slower: KvSetting) -> float | None:
        """How many times faster ``faster``'s prefill is than ``slower``'s; None without both."""
        a, b = self.speeds.get(faster), self.speeds.get(slower)
        return None if a is None or b is None or b.prefill <= 0 else a.prefill / b.prefill


FINDING = CpuKvSpeeds(
    speeds={Q8_FA: Speed(142.5), F16_FA: Speed(254.5), F16_NO_FA: Speed(215.0)},
    source=(
        "as measured on llama.cpp b11312's CPU build (SmolLM2-135M, a 2,000-token prompt), "
        "not measured on this machine"
    ),
    measured_here=False,
)


@dataclass(frozen=True, slots=True)
class SpeedRecord:
    """What one bench measured on one CPU, as stored."""

    cpu: str
    engine: str
    model: str
    prompt_tokens: int
    recorded_at: str
    speeds: list[dict[str, Any]]
    """One ``{"cache_type", "flash_attn", "prefill", "decode"}`` per setting."""

    def figures(self) -> dict[KvSetting, Speed]:
        """The speeds by setting. Raises ValueError/KeyError/TypeError when they are not."""
        found = dict(_speed(item) for item in self.speeds)
        if len(found) < 2:
            raise ValueError("fewer than two settings measured")
        return found


def path(where: Path | None = None) -> Path:
    return (where or state_dir()) / FILE_NAME


def _speed(item: Any) -> tuple[KvSetting, Speed]:
    """One stored setting's figures. Raises ValueError/KeyError/TypeError when it is not one."""
    setting = KvSetting(item["cache_type"], item["flash_attn"])
    prefill, decode = item["prefill"], item.get("decode")
    if setting not in SETTINGS:
        raise ValueError(f"not a compared setting: {setting}")
    for value in (prefill, decode):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9
        ):
            raise ValueError(f"not a speed: {value!r}")
    if prefill is None:
        raise ValueError("no prefill figure")
    return setting, Speed(float(prefill), None if decode is None else float(decode))


def _record(item: Any) -> SpeedRecord:
    if not isinstance(item, dict):
        raise TypeError("a record is an object")
    record = SpeedRecord(**item)
    if not all(isinstance(v, str) for v in (record.cpu, record.engine, record.recorded_at)):
        raise TypeError("cpu, engine and recorded_at are text")
    record.figures()  # raises for figures that are not speeds
    return record


def load_speeds(cpu: str, *, where: Path | None = None) -> CpuKvSpeeds:
    """The speeds measured on ``cpu`` (:func:`homelab.gpu.cpu.cpu_name`), else :data:`FINDING`
    (with a note when a stored file was there but unusable: it is set aside, said, ignored)."""
    file = path(where)
    if not file.exists():
        return FINDING
    records = read_records(
        file, schema=SCHEMA, field="records", what="CPU KV speed store", parse=_record
    )
    if not records:
        return _ignored(f"{file} was unreadable and is set aside beside it")
    mine = [r for r in records if r.cpu == cpu]
    if not mine:
        return _ignored(f"{file} holds measurements of {records[-1].cpu}, not of this CPU ({cpu})")
    last = mine[-1]
    source = f"measured on this CPU by {BENCH} (llama.cpp {last.engine}, {last.recorded_at})"
    return CpuKvSpeeds(last.figures(), source, measured_here=True)


def _ignored(reason: str) -> CpuKvSpeeds:
    note = (
        f"No CPU KV speed measurement used ({reason}): the plan takes the documented finding; "
        f"run {BENCH} --store to measure this CPU."
    )
    return CpuKvSpeeds(FINDING.speeds, FINDING.source, measured_here=False, notes=(note,))


def save_speeds(
    cpu: str,
    engine: str,
    speeds: Mapping[KvSetting, Speed],
    *,
    model: str,
    prompt_tokens: int,
    where: Path | None = None,
) -> Path:
    """Store what a bench measured on ``cpu``: it replaces that CPU's earlier record (other
    CPUs' records, from a state folder shared between machines, are kept).

    Raises:
        CpuSpeedStoreError: the state folder cannot be written.
    """
    file = path(where)
    record = SpeedRecord(
        cpu=cpu,
        engine=engine,
        model=model,
        prompt_tokens=prompt_tokens,
        recorded_at=time.strftime("%Y-%m-%d %H:%M %Z"),
        speeds=[
            {
                "cache_type": s.cache_type,
                "flash_attn": s.flash_attn,
                "prefill": speeds[s].prefill,
                "decode": speeds[s].decode,
            }
            for s in sorted(speeds)
        ],
    )
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        with locked(file):
            kept = read_records(
                file, schema=SCHEMA, field="records", what="CPU KV speed store", parse=_record
            )
            others = [r for r in kept if r.cpu != cpu]
            write_records(file, [*others, record], schema=SCHEMA, field="records", keep=MAX_CPUS)
    except OSError as error:
        raise CpuSpeedStoreError(
            f"cannot write {file}: {error.strerror or error}",
            hint="Check that the homelab state folder is writable (HOMELAB_STATE_DIR).",
        ) from None
    return file
