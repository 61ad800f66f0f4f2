"""Predicted vs actual: the plan's memory figures next to what llama-server logged.

Pure functions over a :class:`~homelab.plan.planner.Plan` and a parsed load log
(:func:`homelab.engine.llamacpp.log.parse_load_log`). One row per part the plan
prices and the log reports:

- ``weights``: the model buffers on the plan's device (a CPU plan: every host
  buffer, ``CPU_Mapped``/``CPU``/``CPU_REPACK``; a GPU plan: the card's, e.g.
  ``CUDA0``) against ``Plan.weights_on_device``;
- ``KV``: the sum of the ``llama_kv_cache: size =`` lines (SWA cache included)
  against the full + SWA allocation; with partial offload the card's ``KV buffer``
  lines instead, because the plan only prices the offloaded layers' cache;
- ``recurrent``: the ``llama_memory_recurrent: size =`` lines (or the card's
  ``RS buffer`` lines with partial offload) against the recurrent allocation;
- ``compute``: the compute buffer on the plan's device (``sched_reserve``)
  against the plan's compute buffer (estimated, or measured by calibration);
- ``output``: the host output buffer (logits, ``4 × n_vocab × n_seq_max`` bytes
  as ``llama_context::output_reserve`` sizes it at start-up).

An actual figure is None when the log has no such line (a load that failed
early, a build printing at ``-lv 3``); it is never 0 for "not known". The
``KV`` and ``recurrent`` rows are left out when the plan prices none and the
log shows none (a model without attention or without recurrent layers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from homelab.engine.llamacpp.log import MIB, BufferLine, LoadLog, mib_byte_range
from homelab.plan.planner import Plan
from homelab.units import format_bytes

ROW_NAMES = ("weights", "KV", "recurrent", "compute", "output")


@dataclass(frozen=True, slots=True)
class ActualRow:
    """One part of the memory: planned bytes, logged bytes, and where they were logged.

    ``actual`` is the logged MiB figure (summed over ``lines`` log lines) in bytes;
    None when the log has no line for it. ``consistent`` says whether ``predicted``
    lies inside the interval the logged 2-decimal figures allow (None when either
    side is unknown): a non-zero ``difference`` with ``consistent`` True is only
    the log's rounding.
    """

    name: str
    where: str
    predicted: int | None
    actual: int | None
    lines: int
    consistent: bool | None

    @property
    def difference(self) -> int | None:
        """``actual − predicted`` in bytes; None when either is unknown."""
        if self.actual is None or self.predicted is None:
            return None
        return self.actual - self.predicted


@dataclass(frozen=True, slots=True)
class _Logged:
    """Some log figures summed: MiB values, the devices they came from, float32 or not."""

    mib: tuple[float, ...]
    devices: tuple[str, ...]
    single_precision: bool = False

    @property
    def found(self) -> bool:
        return bool(self.mib)

    def bytes(self) -> int | None:
        return round(sum(self.mib) * MIB) if self.mib else None

    def consistent_with(self, n_bytes: int | None) -> bool | None:
        if n_bytes is None or not self.mib:
            return None
        lo = hi = 0
        for value in self.mib:
            a, b = mib_byte_range(value, single_precision=self.single_precision)
            lo, hi = lo + a, hi + b
        return lo <= n_bytes <= hi


def is_host_buffer(device: str) -> bool:
    """True for llama.cpp buffer types in system RAM (``CPU``, ``CPU_Mapped``,
    ``CPU_REPACK``, ``CUDA_Host``, ``AMX``...), False for a device's own memory."""
    return device.startswith("CPU") or device.endswith("_Host") or device == "AMX"


def _buffers(log: LoadLog, kind: str, *, host: bool) -> _Logged:
    chosen: list[BufferLine] = [
        b for b in log.buffers if b.kind == kind and is_host_buffer(b.device) == host
    ]
    return _Logged(tuple(b.mib for b in chosen), tuple(dict.fromkeys(b.device for b in chosen)))


def _row(name: str, predicted: int | None, logged: _Logged, default_where: str) -> ActualRow:
    where = ", ".join(logged.devices) if logged.devices else default_where
    return ActualRow(
        name=name,
        where=where,
        predicted=predicted,
        actual=logged.bytes(),
        lines=len(logged.mib),
        consistent=logged.consistent_with(predicted),
    )


def predicted_output_bytes(plan: Plan) -> int | None:
    """Host output buffer llama-server allocates at start-up: F32 logits for one row per
    slot (``4 × n_vocab × n_seq_max``); None when the header has no vocabulary."""
    n_vocab = plan.geometry.n_vocab
    if not n_vocab:
        return None
    return 4 * n_vocab * plan.settings.n_seq


def compare(plan: Plan, load_log: LoadLog) -> tuple[ActualRow, ...]:
    """Rows of predicted vs actual bytes (see the module docstring for each row's sources)."""
    on_host = not plan.on_gpu
    place = "RAM" if on_host else "GPU"
    partial = plan.on_gpu and plan.n_gpu_layers is not None
    alloc = plan.candidate.allocation
    kv_predicted = alloc.full_bytes + alloc.swa_bytes

    if partial:
        kv_logged = _buffers(load_log, "KV", host=False)
        rs_logged = _buffers(load_log, "RS", host=False)
    else:  # the "size =" lines, labelled with the devices their buffers went to
        kv_logged = _Logged(
            tuple(line.size_mib for line in load_log.kv_caches),
            _buffers(load_log, "KV", host=on_host).devices,
            single_precision=True,
        )
        rs_logged = _Logged(
            tuple(line.size_mib for line in load_log.recurrent),
            _buffers(load_log, "RS", host=on_host).devices,
            single_precision=True,
        )

    rows = [
        _row("weights", plan.weights_on_device, _buffers(load_log, "model", host=on_host), place)
    ]
    if kv_predicted or kv_logged.found:
        rows.append(_row("KV", kv_predicted, kv_logged, place))
    if alloc.recurrent_bytes or rs_logged.found:
        rows.append(_row("recurrent", alloc.recurrent_bytes, rs_logged, place))
    rows.append(
        _row(
            "compute",
            plan.candidate.engine.compute_buffer,
            _buffers(load_log, "compute", host=on_host),
            place,
        )
    )
    rows.append(
        _row("output", predicted_output_bytes(plan), _buffers(load_log, "output", host=True), "RAM")
    )
    return tuple(rows)


def row(rows: Iterable[ActualRow], name: str) -> ActualRow | None:
    """The row called ``name`` (one of :data:`ROW_NAMES`), or None when it was left out."""
    return next((r for r in rows if r.name == name), None)


def _difference_text(r: ActualRow) -> str:
    diff = r.difference
    if diff is None:
        return "n/a"
    if r.consistent:
        return "= (log rounding)"
    text = ("+" if diff > 0 else "") + format_bytes(diff)
    if r.predicted:
        text += f" ({diff / r.predicted:+.0%})"
    return text


def format_actuals(rows: Iterable[ActualRow]) -> str:
    """A small aligned table for a person: part, predicted, actual, difference, where."""
    table = [("", "predicted", "actual", "difference", "where")]
    for r in rows:
        table.append(
            (
                r.name,
                format_bytes(r.predicted),
                format_bytes(r.actual),
                _difference_text(r),
                r.where,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(5)]
    out = []
    for line in table:
        cells = [line[0].ljust(widths[0])]
        cells += [line[i].rjust(widths[i]) for i in (1, 2)]
        cells += [line[3].ljust(widths[3]), line[4]]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def actuals_to_dict(rows: Iterable[ActualRow]) -> list[dict[str, Any]]:
    """JSON-ready rows, sizes in bytes (None where unknown)."""
    return [
        {
            "name": r.name,
            "where": r.where,
            "predicted": r.predicted,
            "actual": r.actual,
            "difference": r.difference,
            "log_lines": r.lines,
            "within_log_rounding": r.consistent,
        }
        for r in rows
    ]
