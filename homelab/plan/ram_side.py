"""The system-RAM side of a plan that keeps weights off the card, priced as llama.cpp holds
it, and weighed against the RAM the machine has.

What llama-server holds in RAM for such a plan (its load log prints each): the
``CPU_Mapped`` span of the file (page cache of the mapped tensors the CPU keeps and does not
repack), the ``CPU_REPACK`` buffer (the CPU backend's own copies of the weights it repacks:
:mod:`homelab.plan.cpu_repack`) and the CPU's compute buffer. The budget is psutil's
``available`` (what a new program can take without swapping: the desktop's and every other
program's share is already out of it, as they use it now) less a headroom for the OS and
the programs' growth. A plan whose RAM side is more would push the machine into swap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from homelab.gguf.arch_keys import ArchKeys
from homelab.gguf.plausible import MAX_EXPERTS, MAX_WIDTH
from homelab.gpu.report import CpuMemory
from homelab.plan.budget import HEADROOM_RAM
from homelab.plan.cpu_repack import engine_features, repacked_size, repacks
from homelab.plan.weight_groups import Held, held_in_ram, mapped_span
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.gguf.geometry import Geometry
    from homelab.gguf.header import GgufModel
    from homelab.plan.budget import WeightPlacement


@dataclass(frozen=True, slots=True)
class RamSide:
    """What llama-server holds in system RAM, in bytes, buffer by buffer as it logs them."""

    mapped: int
    """``CPU_Mapped``: per file, the span from the first byte of the CPU's non-repacked
    tensors to the last (when the CPU's repack term is unknown: as if none were)."""
    repack: int | None
    """``CPU_REPACK``: the repacked copies; None when the CPU is one homelab does not know."""
    compute: int
    """The CPU's compute buffer (an estimate: the expert layers' activations for one
    micro-batch)."""
    resident: int = 0
    """The CPU's mapped tensors themselves: the page cache it reads every token and must keep.
    The span is more where the card's tensors lie between them, but those pages are read
    once, to upload, and the kernel drops them when RAM is wanted (file pages never swap)."""

    @property
    def total(self) -> int | None:
        """What must stay in RAM: the CPU's own mapped tensors, the repacked copies and the
        compute buffer (None when the repack term is unknown)."""
        return None if self.repack is None else self.resident + self.repack + self.compute


def ram_side(
    weights: WeightPlacement,
    first_gpu_block: int,
    cpu_flags: frozenset[str] | None,
    *,
    host_buffer: bool,
    compute: int,
) -> RamSide:
    """The RAM side of these weights when blocks below ``first_gpu_block`` run on the CPU and
    the first ``weights.n_cpu_moe`` blocks' experts stay there; ``host_buffer``: a CUDA card
    is among the devices (its pinned host buffer, swapped for the mapping, comes before the
    repack buffer: nothing is repacked)."""
    features = engine_features(cpu_flags)
    layout = weights.layout
    held = [] if layout is None else held_in_ram(layout, first_gpu_block, weights.n_cpu_moe)
    repack, unknown, mapped = 0, False, list[Held]()
    for piece in held:  # a group's members are of one type and shape: repacked alike
        packed = False if host_buffer else repacks(piece.type_name, piece.matmul_rows, features)
        unknown = unknown or packed is None
        if packed:
            repack += repacked_size(piece.n_bytes) * piece.members
        else:
            mapped.append(piece)
    resident = sum(piece.n_bytes * piece.members for piece in mapped)
    return RamSide(mapped_span(mapped), None if unknown else repack, compute, resident)


def cpu_compute_estimate(model: GgufModel, geometry: Geometry, ubatch: int, batch: int) -> int:
    """The CPU's compute buffer when routed experts run there: one micro-batch's input copy
    and the experts' gate, up and down products of one layer (F32); 0 for a model without
    routed experts. An estimate: the gate/up/GLU products (``12 × used × width × ubatch``)
    dominate it, as measured on the loopback worker (more width or experts used add exactly
    that); the log adds the graph's inputs, which the scheduler keeps on the CPU (the KQ
    mask among them, so it moves with the context too: 6.15–7.15 MiB logged against 6.25
    estimated for 2 × 512-wide experts, ubatch 512, context 512–4,096)."""
    meta = ArchKeys(model.header, geometry.arch)
    used = meta.optional_int("expert_used_count", high=MAX_EXPERTS)
    width = meta.optional_int("expert_feed_forward_length", high=MAX_WIDTH)
    if not used or not width:
        return 0
    n_ubatch = min(ubatch, batch)
    return 4 * n_ubatch * (2 * geometry.n_embd + used * (3 * width + geometry.n_embd))


@dataclass(frozen=True, slots=True)
class RamCheck:
    """The RAM side weighed against the RAM the machine has now."""

    side: RamSide
    available: int | None
    """psutil's ``available``; None when psutil could not say."""
    headroom: int = HEADROOM_RAM

    @property
    def usable(self) -> int | None:
        return None if self.available is None else self.available - self.headroom

    @property
    def fits(self) -> bool | None:
        """None: the check could not be made (RAM or the CPU's repack term unknown)."""
        need, usable = self.side.total, self.usable
        return None if need is None or usable is None else need <= usable

    def unknown_reason(self) -> str | None:
        """Why the check could not be made; None when it was."""
        if self.available is None:
            return "the system's free RAM could not be read (psutil)"
        if self.side.repack is None:
            return (
                "this CPU is not one homelab knows (x86-64 with /proc/cpuinfo), so what "
                "llama.cpp's CPU backend repacks is unknown"
            )
        return None

    def words(self) -> str:
        """The arithmetic in one sentence (the refusal's and the step-down's numbers)."""
        side = self.side
        repack = "unknown" if side.repack is None else format_bytes(side.repack)
        need = "" if side.total is None else f" = {format_bytes(side.total)}"
        have = (
            "unknown"
            if self.available is None
            else f"{format_bytes(self.available)} available − {format_bytes(self.headroom)} "
            f"headroom = {format_bytes(max(self.available - self.headroom, 0))}"
        )
        return (
            f"RAM needed: the CPU's mapped tensors {format_bytes(side.resident)} (of a "
            f"{format_bytes(side.mapped)} mapped span) + repacked {repack} + compute "
            f"{format_bytes(side.compute)}{need}; RAM free for it: {have}"
        )


def check_ram(side: RamSide, memory: CpuMemory | None) -> RamCheck:
    """``side`` against ``memory`` (None: psutil could not say)."""
    return RamCheck(side, None if memory is None else memory.available)
