"""Layers split across several devices, the way llama-server's ``--split-mode layer`` does it.

What llama.cpp does (``src/llama-model.cpp``, ``load_tensors``): the offloaded layers are
the last ``-ngl`` of the ``n_layer + 1`` (the output layer counts as the last one); with
``--tensor-split t0,t1,...`` layer ``i`` of them goes to the first device whose running sum
of ``t`` exceeds ``i`` (an ``upper_bound`` over the normalised sums), so whole numbers
that add up to the offloaded count place exactly ``t_d`` layers on device ``d``, in
``--device`` order, and the output layer always lands on the last device. A layer's KV
lives on the layer's device (``src/llama-kv-cache.cpp``); the input embedding stays on the
CPU. Every device gets its own compute buffer for its part of the graph; the logits are
on the output layer's device; with more than one device and every layer offloaded the
scheduler runs a pipeline and keeps four copies of each part's inputs
(``ggml-backend.cpp`` ``GGML_SCHED_MAX_COPIES``).

So the plan orders the devices (workers first, as llama-server itself does, then the local
cards with the main card last), charges each one its fixed costs (CUDA context on a local
card, its compute buffer, the output layer and logits on the last), and splits the blocks
in proportion to what each has left: every device filled to the same fraction of its room.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import compress
from operator import attrgetter

from homelab.gguf.geometry import Geometry
from homelab.plan.budget import WeightPlacement
from homelab.plan.devices import PlanDevice
from homelab.plan.engine_state import CUDA_CONTEXT_BYTES, EngineState, estimate_engine_state
from homelab.plan.fit import Candidate, Fitter
from homelab.plan.kv import KvAllocation, KvSettings, kv_allocation

PIPELINE_COPIES = 4
"""ggml's scheduler keeps this many copies of each split's inputs in pipeline mode."""
_SEARCH_STEPS = 40


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """What one device holds in a plan, in bytes."""

    device: PlanDevice
    first_block: int
    n_blocks: int
    output: bool
    """It holds the output layer (the last device of the split)."""
    weights: int
    kv: int
    engine: EngineState
    """This device's CUDA context (local cards) and compute buffer."""

    @property
    def layers(self) -> int:
        """Its ``--tensor-split`` entry: blocks, plus one for the output layer."""
        return self.n_blocks + int(self.output)

    @property
    def used(self) -> int:
        return self.weights + self.kv + self.engine.total

    @property
    def spare(self) -> int:
        return self.device.budget.usable - self.used

    @property
    def blocks(self) -> range:
        return range(self.first_block, self.first_block + self.n_blocks)

    @property
    def block_range(self) -> str:
        """``no blocks``, ``block 3`` or ``blocks 0–8``: what it holds, in words."""
        if self.n_blocks == 0:
            return "no blocks"
        if self.n_blocks == 1:
            return f"block {self.first_block}"
        return f"blocks {self.first_block}–{self.blocks[-1]}"


def _sub(geometry: Geometry, blocks: range) -> Geometry:
    """The layers of these blocks (a comparison per layer, in C: thousands of blocks)."""
    indices = map(attrgetter("index"), geometry.layers)
    return replace(
        geometry, layers=tuple(compress(geometry.layers, map(blocks.__contains__, indices)))
    )


class SplitFitter(Fitter):
    """Answers "does this fit?" over several devices: each must hold its share."""

    def __init__(
        self,
        geometry: Geometry,
        devices: tuple[PlanDevice, ...],
        weights: WeightPlacement,
        base: KvSettings,
        *,
        first_block: int = 0,
    ) -> None:
        n_blocks = len(weights.per_block)
        self.devices = devices
        self.weights = weights
        self.blocks = range(first_block, n_blocks)
        self.pipeline = len(devices) > 1 and first_block == 0
        self.full_geometry = geometry
        sub = _sub(geometry, self.blocks)
        on_device = weights.on_device(len(self.blocks))
        room = sum(d.budget.usable for d in devices) - on_device
        super().__init__(sub, room, base, on_gpu=True)
        self._one = [_sub(geometry, range(i, i + 1)) for i in self.blocks]

    def _engines(self, geometry: Geometry, alloc: KvAllocation, s: KvSettings) -> list[EngineState]:
        """Each device's engine state, in device order (the last one has the logits)."""
        shared = estimate_engine_state(geometry, alloc, s, on_gpu=True)
        n_ubatch = min(s.n_ubatch, s.n_batch, alloc.n_ctx)
        copies = 0
        if self.pipeline:
            copies = (PIPELINE_COPIES - 1) * (
                4 * geometry.n_embd * n_ubatch + shared.attention_mask
            )
        last = len(self.devices) - 1
        return [
            replace(
                shared,
                cuda_context=CUDA_CONTEXT_BYTES if d.cuda else 0,
                logits=shared.logits if i == last else 0,
                activations=shared.activations + copies,
            )
            for i, d in enumerate(self.devices)
        ]

    def _costs(self, n_ctx: int, n_seq: int) -> tuple[Candidate, list[int], list[int]]:
        """(candidate with the devices' engine states summed, block costs, device rooms)."""
        settings = replace(self.base, n_ctx=n_ctx, n_seq=n_seq)
        alloc = kv_allocation(self.geometry, settings)
        engines = self._engines(self.geometry, alloc, settings)
        block_costs = [
            self.weights.per_block[i] + kv_allocation(one, settings).total
            for i, one in zip(self.blocks, self._one, strict=True)
        ]
        rooms = [
            d.budget.usable - e.total - (self.weights.output if i == len(engines) - 1 else 0)
            for i, (d, e) in enumerate(zip(self.devices, engines, strict=True))
        ]
        total = EngineState(
            cuda_context=sum(e.cuda_context for e in engines),
            logits=sum(e.logits for e in engines),
            activations=sum(e.activations for e in engines),
            attention_mask=sum(e.attention_mask for e in engines),
            fa_scratch=sum(e.fa_scratch for e in engines),
        )
        self._last_engines = engines
        return Candidate(settings, alloc, total), block_costs, rooms

    def candidate(self, n_ctx: int, n_seq: int) -> Candidate:
        return self._costs(n_ctx, n_seq)[0]

    def fits(self, n_ctx: int, n_seq: int) -> bool:
        _, costs, rooms = self._costs(n_ctx, n_seq)
        return _fill(costs, rooms, 1.0) is not None

    def shares(self, candidate: Candidate) -> tuple[DeviceShare, ...]:
        """Each device's blocks, weights, KV and engine at ``candidate``: every device
        filled to the same fraction of its room (the smallest that places every block)."""
        s = candidate.settings
        _, costs, rooms = self._costs(s.n_ctx, s.n_seq)
        engines = self._last_engines
        lo, hi = 0.0, 1.0
        counts = _fill(costs, rooms, hi)
        if counts is None:  # the candidate does not fit: show the greedy split anyway
            counts = _fill(costs, [max(r, 0) for r in rooms], 1.0, force=True) or []
        else:
            for _ in range(_SEARCH_STEPS):
                mid = (lo + hi) / 2
                found = _fill(costs, rooms, mid)
                if found is None:
                    lo = mid
                else:
                    hi, counts = mid, found
        shares = []
        first = self.blocks.start
        last = len(self.devices) - 1
        for i, (device, n, engine) in enumerate(zip(self.devices, counts, engines, strict=True)):
            blocks = range(first, first + n)
            kv = kv_allocation(_sub(self.full_geometry, blocks), s).total if n else 0
            weights = sum(self.weights.per_block[b] for b in blocks)
            weights += self.weights.output if i == last else 0
            shares.append(DeviceShare(device, first, n, i == last, weights, kv, engine))
            first += n
        return tuple(shares)


def _fill(
    costs: list[int], rooms: list[int], fraction: float, *, force: bool = False
) -> list[int] | None:
    """Blocks per device, filling each in turn up to ``fraction`` of its room; None when
    some block is left over (``force``: the last device takes what is left)."""
    if any(r < 0 for r in rooms) and not force:
        return None
    counts = [0] * len(rooms)
    d, used = 0, 0
    for cost in costs:
        while d < len(rooms) and used + cost > fraction * rooms[d]:
            d, used = d + 1, 0
        if d == len(rooms):
            if not force:
                return None
            d = len(rooms) - 1
        counts[d] += 1
        used += cost
    return counts


def order_devices(
    geometry: Geometry,
    devices: tuple[PlanDevice, ...],
    weights: WeightPlacement,
    base: KvSettings,
    min_ctx: int,
) -> tuple[tuple[PlanDevice, ...], list[str]]:
    """The devices in llama-server's order for the split, and notes on the choice.

    Workers come first (as llama-server orders them by itself, so activations cross the
    network once each way), then the local cards by index, with the main card last: it
    holds the output layer and the logits. The main card is the largest that drives no
    display and can hold them; else the largest card. A device that cannot hold its own
    fixed costs and one block at ``min_ctx`` tokens is left out, and a note says so.
    """
    settings = replace(base, n_ctx=min_ctx, n_seq=1)
    alloc = kv_allocation(geometry, settings)
    engine = estimate_engine_state(geometry, alloc, settings, on_gpu=True)
    block = min(
        (
            w + kv_allocation(_sub(geometry, range(i, i + 1)), settings).total
            for i, w in enumerate(weights.per_block)
        ),
        default=0,
    )
    notes: list[str] = []
    kept = []
    for d in devices:
        need = (CUDA_CONTEXT_BYTES if d.cuda else 0) + engine.compute_buffer - engine.logits + block
        if d.budget.usable < need:
            notes.append(
                f"{d.label} is left out of the split: {max(d.budget.usable, 0):,} bytes usable, "
                f"below the {need:,} its engine state and one block need."
            )
        else:
            kept.append(d)
    remote = [d for d in kept if d.remote]
    local = sorted((d for d in kept if not d.remote), key=lambda d: d.index or 0)
    if local:
        main_need = CUDA_CONTEXT_BYTES + engine.compute_buffer + weights.output + block
        headless = [
            d for d in local if not d.budget.display_active and d.budget.usable >= main_need
        ]
        main = max(headless or local, key=lambda d: d.budget.usable)
        local = [d for d in local if d is not main] + [main]
    return tuple(remote + local), notes


def split_notes(devices: tuple[PlanDevice, ...]) -> list[str]:
    """What a person should know about this split's speed."""
    notes = []
    cards = {d.budget.name.split(": ", 1)[-1] for d in devices if d.cuda}
    if len(cards) > 1:
        notes.append(
            f"The cards differ ({', '.join(sorted(cards))}): with --split-mode layer every token passes "
            "through each card's layers in turn, so the slower card sets the pace for its share."
        )
    hosts = sorted({d.endpoint for d in devices if d.endpoint is not None})
    if hosts:
        notes.append(
            f"Layers on {', '.join(hosts)} run over the network (llama.cpp RPC): each token's "
            "activations cross the link, so a long prompt's prefill is bound by its bandwidth."
        )
    return notes
