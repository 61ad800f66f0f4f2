"""What a plan costs in decode speed, as an estimate marked as one.

Generating one token reads every weight the token passes through once, on the device that
holds it, plus the KV cache of its conversation: decode is bound by memory bandwidth, so

    tokens/s ≤ 1 / Σ (bytes read per token on a side ÷ that side's bandwidth)

over the sides (each card or worker, and system RAM), which run one after another. Per
token a side reads: every tensor of the blocks it holds, but of a block's routed experts
(``ffn_*_exps``) only the active ones, ``expert_used_count / expert_count`` of each; the
output layer on the device that holds it; in RAM one row of the input embedding, the
experts ``--n-cpu-moe`` keeps there and the blocks ``-ngl K`` leaves on the CPU. A dense
model is the same sum without experts. NextN/MTP blocks are not run by plain decode.

It is an upper bound (compute, launch overhead and the expert routing's imbalance only
slow it down), and an estimate: the card's bandwidth is its data sheet's, from NVML (bus
width × memory clock × 2), system RAM's a measurement of this machine
(:mod:`homelab.gpu.ram_bandwidth`). An unknown bandwidth or expert count makes the bound
unknown, never a guess; a stored ``homelab bench`` replaces it (:func:`with_measured`).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from homelab.gguf.ggml_types import ggml_type
from homelab.plan.weight_groups import WeightLayout
from homelab.plan.working import Step
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel
    from homelab.gpu.ram_bandwidth import RamBandwidth
    from homelab.gpu.report import GpuReport
    from homelab.plan.planner import Plan

RAM = "system RAM"


@dataclass(frozen=True, slots=True)
class DecodeSide:
    """One place weights are read from while a token is generated."""

    where: str
    weights: int
    """Weight bytes read per generated token."""
    kv_per_cell: int
    """KV bytes of the full-attention layers read per token of context (K and V of each
    cell), per generated token."""
    bandwidth: int | None
    """Bytes per second; None: unknown."""
    source: str
    """Where the bandwidth comes from, or why it is unknown."""
    swa_per_cell: int = 0
    """The same for the sliding-window layers, which read at most ``n_swa`` cells."""
    n_swa: int = 0
    row: int = 0
    """Of ``weights``, the input embedding's row (RAM's only read on a card that holds every
    layer and expert: then left out of the sum when RAM's bandwidth is unknown, saying so)."""

    def read(self, ctx: int) -> int:
        """Bytes read per generated token at ``ctx`` tokens of context."""
        return self.weights + self.kv_per_cell * ctx + self.swa_per_cell * min(ctx, self.n_swa)


@dataclass(frozen=True, slots=True)
class DecodeBound:
    """A plan's decode bound for one conversation, and what replaced it when measured."""

    sides: tuple[DecodeSide, ...]
    ctx: int
    """The slot's context, where the second figure is taken."""
    unknown: str | None = None
    """Why there is no bound (None: there is one)."""
    measured_tps: float | None = None
    """A stored ``homelab bench``'s median decode rate of one request at these flags."""
    measured_note: str = ""

    def counted(self) -> tuple[DecodeSide, ...]:
        """The sides in the sum: all but one of unknown bandwidth that reads only the
        input embedding's row (a few KiB)."""
        return tuple(s for s in self.sides if s.bandwidth is not None or s.read(self.ctx) > s.row)

    def tokens_per_s(self, ctx: int = 0) -> float | None:
        """The bound at ``ctx`` tokens of context; None when it is unknown."""
        if self.unknown is not None:
            return None
        seconds = 0.0
        for side in self.counted():
            if side.bandwidth is None:
                return None
            seconds += side.read(ctx) / side.bandwidth
        return 1 / seconds if seconds > 0 else None


def active_fraction(model: GgufModel, layout: WeightLayout | None = None) -> tuple[int, int] | str:
    """(experts a token uses, experts per block) of a MoE model; (1, 1) for a dense one; the
    reason as a sentence when the header does not say it plainly. ``layout``: the model's
    (made here when not given)."""
    if not (layout or WeightLayout.of(model)).has_routed_experts():
        return 1, 1
    arch = model.arch or "?"
    used = model.metadata.get(f"{arch}.expert_used_count")
    count = model.metadata.get(f"{arch}.expert_count")
    for key, value in (("expert_used_count", used), ("expert_count", count)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            said = "does not say" if value is None else f"says {value!r} for"
            return f"the header {said} {arch}.{key}: how many experts a token reads is unknown"
    assert isinstance(used, int) and isinstance(count, int)
    if used > count:
        return f"the header says a token uses {used} of {count} experts, which no model does"
    return used, count


def _kv_read(
    plan: Plan, runs: list[tuple[int, int, int]], n_sides: int
) -> tuple[list[int], list[int]]:
    """KV bytes each side reads per cell of context, of the full-attention layers and of the
    sliding-window ones: each layer's on the side holding its block (``runs``), else in RAM.
    Priced per shape of layer, counted per side by bisection (thousands of blocks)."""
    layers = plan.geometry.kv_layers
    indices = list(map(attrgetter("index"), layers))
    kv, swa = [0] * n_sides, [0] * n_sides
    if indices != sorted(
        set(indices)
    ):  # repeated or out of order (by hand): one by one, the last counts
        cells = {layer.index: layer for layer in layers}
        for index, layer in cells.items():
            side = next((at for first, end, at in runs if first <= index < end), n_sides - 1)
            (swa if layer.kind == "swa" else kv)[side] += _cell(plan, layer.k_width, layer.v_width)
        return kv, swa
    keys = list(map(attrgetter("k_width", "v_width", "kind"), layers))
    for key in dict.fromkeys(keys):
        cell, into = _cell(plan, key[0], key[1]), swa if key[2] == "swa" else kv
        where = list(compress(indices, map(key.__eq__, keys)))
        left = len(where)
        for first, end, side in runs:
            held = bisect_left(where, end) - bisect_left(where, first)
            into[side] += held * cell
            left -= held
        into[n_sides - 1] += left * cell
    return kv, swa


def _cell(plan: Plan, k_width: int, v_width: int) -> int:
    """KV bytes of one cell of a layer of these widths (K, and V unless MLA's view of K)."""
    k, v = ggml_type(plan.settings.type_k), ggml_type(plan.settings.type_v)
    width_v = 0 if plan.geometry.is_mla else v_width
    return round(k_width * k.type_size / k.block_size + width_v * v.type_size / v.block_size)


def _sides(plan: Plan, report: GpuReport, ram: RamBandwidth | None) -> list[DecodeSide]:
    """The plan's devices (in llama-server's order), then system RAM."""
    sides = []
    for share in plan.devices if plan.on_gpu else ():
        device = share.device
        card = next((d for d in report.devices if d.index == device.index), None)
        bandwidth = None if card is None else card.memory_bandwidth
        if card is not None and bandwidth is not None:
            source = f"NVML: {card.memory_bus_bits}-bit bus × {card.memory_clock_mhz:,} MHz × 2"
        elif device.remote:
            source = "unknown: a worker does not report its bandwidth"
        elif report.source == "synthetic":
            source = "unknown: a synthetic card has no bandwidth"
        else:
            source = "unknown: NVML did not report the memory bus width and clock"
        sides.append(DecodeSide(device.label, 0, 0, bandwidth, source))
    if ram is None:
        source = "unknown: not measured yet (`homelab bench --ram-bandwidth`)"
    else:
        source = f"measured {ram.measured_at[:10]} ({ram.method})"
    sides.append(DecodeSide(RAM, 0, 0, None if ram is None else ram.bytes_per_s, source))
    return sides


def _owners(plan: Plan) -> list[tuple[int, int, int]]:
    """(first block, end block, side index) of the blocks each device holds, in block order,
    as runs that do not overlap (where two devices' ranges did, the later one's)."""
    ranges = [
        (share.first_block, share.first_block + share.n_blocks, i)
        for i, share in enumerate(plan.devices if plan.on_gpu else ())
        if share.n_blocks > 0
    ]
    cuts = sorted({edge for first, end, _ in ranges for edge in (first, end)})
    runs = []
    for first, end in zip(cuts, cuts[1:], strict=False):
        side = next((i for a, b, i in reversed(ranges) if a <= first and end <= b), None)
        if side is not None:
            runs.append((first, end, side))
    return runs


def _weights_read(
    plan: Plan, layout: WeightLayout, fraction: tuple[int, int], n_sides: int
) -> tuple[list[int], int]:
    """Weight bytes each side reads per generated token, and the input embedding's row, summed
    per group of tensors: a block's tensors on the side holding the block (its routed
    experts' active share, in RAM when ``--n-cpu-moe`` keeps them there), blocks no device
    holds in RAM, NextN/MTP blocks nowhere (plain decode does not run them)."""
    ram_at = n_sides - 1
    output_at = ram_at
    for i, share in enumerate(plan.devices if plan.on_gpu else ()):
        output_at = i if share.output else output_at
    used, count = fraction
    weights, row = [0] * n_sides, 0
    tied = not any(t.info.name == "output.weight" for t in layout.loose)
    for tensor in layout.loose:  # in file order: the last embedding's row is the one read
        size = tensor.n_bytes
        if tensor.embedding:  # one row in RAM; tied: the output head reads its copy whole
            shape = tensor.info.shape
            rows = shape[1] if len(shape) > 1 else 1  # ne1: the vocabulary
            row = size // max(rows, 1)
            weights[ram_at] += row
            weights[output_at] += size if tied else 0
        else:
            weights[output_at] += size
    runs, n_layer, n_cpu_moe = _owners(plan), plan.geometry.n_layer, plan.weights.n_cpu_moe
    for group in layout.groups:
        size = group.n_bytes * used // count if group.expert else group.n_bytes
        unread = group.below(n_layer)
        for first, end, side in runs:
            first = max(first, n_cpu_moe) if group.expert else first
            end = min(end, n_layer)
            if end > first:
                held = group.below(end) - group.below(first)
                weights[side] += held * size
                unread -= held
        weights[ram_at] += unread * size  # below -ngl's blocks, or experts --n-cpu-moe keeps
    return weights, row


def decode_bound(
    plan: Plan, model: GgufModel, report: GpuReport, ram: RamBandwidth | None
) -> DecodeBound:
    """The bytes each side reads per generated token under ``plan``, and their bandwidths."""
    sides = _sides(plan, report, ram)
    ram_at = len(sides) - 1
    layout = plan.weights.layout
    if layout is None or layout.n_tensors != sum(len(part.tensors) for part in model.parts):
        layout = WeightLayout.of(model)  # weights placed by hand (a test's): place them here
    fraction = active_fraction(model, layout)
    weights, row = _weights_read(
        plan, layout, fraction if isinstance(fraction, tuple) else (1, 1), len(sides)
    )
    kv, swa = _kv_read(plan, _owners(plan), len(sides))
    alloc, n_swa = plan.candidate.allocation, plan.geometry.n_swa
    out = tuple(
        replace(side, weights=w, kv_per_cell=k, swa_per_cell=sw, n_swa=n_swa)
        for side, w, k, sw in zip(sides, weights, kv, swa, strict=True)
    )
    out = (*out[:ram_at], replace(out[ram_at], row=row))
    bound = DecodeBound(out, alloc.ctx_per_slot, None if isinstance(fraction, tuple) else fraction)
    if bound.unknown is None and bound.tokens_per_s() is None:
        missing = next((s for s in bound.counted() if s.bandwidth is None), None)
        why = "nothing is read" if missing is None else f"{missing.where}'s bandwidth is"
        bound = replace(bound, unknown=f"{why} {missing.source if missing else ''}".strip())
    return bound


def with_decode_bound(
    plan: Plan, model: GgufModel, report: GpuReport, ram: RamBandwidth | None
) -> Plan:
    """``plan`` priced in decode speed, its working with the rows that say so."""
    from homelab.plan.steps import describe_plan

    priced = replace(plan, decode=decode_bound(plan, model, report, ram))
    return replace(priced, steps=tuple(describe_plan(priced)))


def with_measured(plan: Plan, tokens_per_s: float | None, note: str) -> Plan:
    """``plan`` with a measured decode rate in place of its estimate (and in its working)."""
    if plan.decode is None or tokens_per_s is None or not tokens_per_s > 0:
        return plan
    from homelab.plan.steps import describe_plan

    decode = replace(plan.decode, measured_tps=tokens_per_s, measured_note=note)
    moved = replace(plan, decode=decode)
    return replace(moved, steps=tuple(describe_plan(moved)))


def decode_dict(bound: DecodeBound) -> dict[str, Any]:
    """The ``--json`` form: bytes per token on each side, bandwidths (bytes/s, null when
    unknown), the bound at an empty and a full slot (null when unknown), ``estimate``: false
    only when a stored bench's measured rate is there."""
    start, full = bound.tokens_per_s(0), bound.tokens_per_s(bound.ctx)
    return {
        "estimate": bound.measured_tps is None,
        "tokens_per_s_max": None if start is None else round(start, 2),
        "tokens_per_s_max_full_slot": None if full is None else round(full, 2),
        "ctx": bound.ctx,
        "unknown": bound.unknown,
        "measured_tokens_per_s": bound.measured_tps,
        "measured": bound.measured_note or None,
        "sides": [
            {
                "where": side.where,
                "weights_bytes_per_token": side.weights,
                "kv_bytes_per_context_token": side.kv_per_cell + side.swa_per_cell,
                "bytes_per_token_full_slot": side.read(bound.ctx),
                "bandwidth": side.bandwidth,
                "bandwidth_source": side.source,
                "counted": side in bound.counted(),
            }
            for side in bound.sides
        ],
    }


def rate(tps: float) -> str:
    """A decode rate as a person reads it: ``131 tok/s``, ``31.4 tok/s``."""
    return f"{tps:,.0f} tok/s" if tps >= 100 else f"{tps:.1f} tok/s"


def gb_per_s(bandwidth: int) -> str:
    """A bandwidth as data sheets write it: decimal GB/s."""
    return f"{bandwidth / 1e9:,.1f} GB/s"


def terms(bound: DecodeBound, ctx: int) -> str:
    """The sum behind the bound at ``ctx`` tokens, side by side: ``1.2 GiB ÷ 936.1 GB/s + …``."""
    parts = []
    for side in bound.counted():
        speed = "?" if side.bandwidth is None else gb_per_s(side.bandwidth)
        parts.append(f"{format_bytes(side.read(ctx))} from {side.where} ÷ {speed}")
    return " + ".join(parts)


def decode_steps(bound: DecodeBound) -> list[Step]:
    """The working's rows: the measured rate when a bench stored one, else the bound at an
    empty and at a full slot with its sum, then each side's bytes and bandwidth."""
    if bound.measured_tps is not None:
        estimate = bound.tokens_per_s()
        was = "unknown" if estimate is None else f"≤ {rate(estimate)}"
        return [
            Step(
                "Decode speed",
                f"{rate(bound.measured_tps)} measured ({bound.measured_note}; the estimate was "
                f"{was})",
                round(bound.measured_tps),
            )
        ]
    start, full = bound.tokens_per_s(0), bound.tokens_per_s(bound.ctx)
    if start is None or full is None:
        head = Step("Decode speed", f"unknown: {bound.unknown}")
    else:
        head = Step(
            "Decode speed, estimate (memory-bandwidth bound, one conversation)",
            f"≤ {rate(start)} at an empty context, ≤ {rate(full)} with {bound.ctx:,} tokens "
            f"in it: 1 / ({terms(bound, bound.ctx)})",
            round(start),
        )
    rows = [head]
    for side in bound.sides:
        kv = side.kv_per_cell + side.swa_per_cell
        speed = "bandwidth " + ("?" if side.bandwidth is None else gb_per_s(side.bandwidth))
        left = "" if side in bound.counted() else ", left out"
        rows.append(
            Step(
                side.where,
                f"reads {format_bytes(side.weights)} of weights per token, + {kv:,} B per "
                f"token of context; {speed} ({side.source}{left})",
                side.weights,
                level=1,
            )
        )
    return rows
