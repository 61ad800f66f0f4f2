"""The fixed part of the budget: what the card has before any conversation.

total − reserved − desktop (peak) − other processes − headroom is what
llama-server may use at all; the weights it places on the card and its own state
come out of that; what is left holds conversations. This module reads those
figures off a ``GpuReport`` (or system RAM) and places the weights as llama.cpp
does: the input embedding stays on the CPU, the output layer goes to the GPU
first, tied embeddings are loaded twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from homelab.errors import GpuProbeError, UsageError
from homelab.gguf.header import GgufModel
from homelab.gpu.report import GpuDevice, GpuReport
from homelab.plan.cuda_padding import cuda_alloc_size
from homelab.plan.weight_groups import WeightLayout
from homelab.units import GiB, MiB

HEADROOM_HEADLESS = 512 * MiB
HEADROOM_DISPLAY = 1024 * MiB
"""A card that drives a desktop needs more slack: windows, video and screenshots
allocate without warning, and an engine at the edge is killed by them."""
HEADROOM_RAM = 2 * GiB
"""Planning in system RAM leaves room for the OS and the user's programs."""


@dataclass(frozen=True, slots=True)
class DeviceBudget:
    """The memory one device offers the engine, by where the rest went."""

    kind: Literal["gpu", "cpu", "rpc"]
    """gpu: a local card (or, for a plan's totals, its offload devices together);
    cpu: system RAM; rpc: a device on another host, reached through llama.cpp's RPC."""
    name: str
    total: int
    reserved: int
    desktop: int
    other: int
    headroom: int
    display_active: bool
    notes: tuple[str, ...] = ()

    @property
    def usable(self) -> int:
        """What llama-server may take in all: weights, state and KV."""
        return self.total - self.reserved - self.desktop - self.other - self.headroom


def pick_device(report: GpuReport, index: int | None) -> GpuDevice | None:
    """The card to plan on: the one asked for, else the one with most free memory."""
    if not report.devices:
        if index is not None:
            raise UsageError(
                f"GPU {index} was asked for, but {report.note or 'no NVIDIA GPU is visible'}"
            )
        return None
    if index is None:
        return max(report.devices, key=lambda d: d.free_min)
    for device in report.devices:
        if device.index == index:
            return device
    found = ", ".join(str(d.index) for d in report.devices)
    raise UsageError(f"there is no GPU {index} (found: {found})")


def device_budget(report: GpuReport, index: int | None = None) -> DeviceBudget:
    """Fixed budget of the chosen card, or of system RAM when there is no card.

    Raises:
        GpuProbeError: the report has neither a card nor RAM figures.
    """
    device = pick_device(report, index)
    if device is None:
        if report.cpu is None:
            raise GpuProbeError("no GPU and no system memory figures to plan with")
        note = report.note or "No NVIDIA GPU: planning against system RAM."
        return DeviceBudget(
            kind="cpu",
            name="system RAM",
            total=report.cpu.total,
            reserved=0,
            desktop=0,
            other=report.cpu.total - report.cpu.available,
            headroom=HEADROOM_RAM,
            display_active=False,
            notes=(note,),
        )
    notes = []
    reserved = device.reserved
    if reserved is None:
        notes.append("This driver does not report reserved memory; it is inside 'other'.")
        reserved = 0
    desktop = device.desktop_peak
    if desktop is None:
        desktop = 0
        if device.display_active:
            notes.append(
                "NVML cannot attribute memory to processes here; the desktop's share is inside 'other'."
            )
    other = max(0, device.total - reserved - device.free_min - desktop)
    display = bool(device.display_active) or desktop > 0
    return DeviceBudget(
        kind="gpu",
        name=f"GPU {device.index}: {device.name}",
        total=device.total,
        reserved=reserved,
        desktop=desktop,
        other=other,
        headroom=HEADROOM_DISPLAY if display else HEADROOM_HEADLESS,
        display_active=display,
        notes=tuple(notes),
    )


@dataclass(frozen=True, slots=True)
class WeightPlacement:
    """Where llama.cpp puts the model's tensors, in bytes."""

    total: int
    output: int
    """Output head and final norm (the tied embedding's copy when there is no output tensor)."""
    per_block: tuple[int, ...]
    """Bytes of each repeating block ``blk.N`` on its device (less its routed experts when
    they stay in RAM: ``n_cpu_moe``)."""
    experts_per_block: tuple[int, ...] = ()
    """Bytes of each block's routed experts (the tensors ``--n-cpu-moe`` keeps in RAM)."""
    n_cpu_moe: int = 0
    """The first this many blocks keep their routed experts in system RAM."""
    cuda_padded: bool = False
    """Priced as a CUDA card holds the tensors (quantized rows padded, 128-byte aligned):
    the device's figures are then a little above the file's bytes."""
    layout: WeightLayout | None = field(default=None, compare=False, repr=False)
    """Every tensor's place in the files, by group (what the RAM side's mapped buffer spans
    and the decode bound reads); None for weights placed by hand."""

    @property
    def embedding(self) -> int | None:
        """The input embedding's bytes, which stay in system RAM; None for weights placed
        by hand (no layout)."""
        if self.layout is None:
            return None
        return sum(t.n_bytes for t in self.layout.loose if t.embedding)

    def on_device(self, n_gpu_blocks: int | None = None) -> int:
        """Weights on the GPU with the last ``n_gpu_blocks`` blocks offloaded (None: all)."""
        blocks = (
            self.per_block
            if n_gpu_blocks is None
            else self.per_block[len(self.per_block) - n_gpu_blocks :]
        )
        if n_gpu_blocks == 0:
            blocks = ()
        return self.output + sum(blocks)


def place_weights(model: GgufModel, *, cuda: bool = False) -> WeightPlacement:
    """Split the model's exact tensor bytes into the output and per-block parts.

    ``cuda``: the blocks and the output are priced as a CUDA card's model buffer holds
    them (:func:`~homelab.plan.cuda_padding.cuda_alloc_size`); ``total`` and the layout
    (the file, what RAM maps) stay the file's bytes. Summed per group of tensors: a
    40,000-tensor MoE has a dozen groups of thousands of members."""
    total = model.weights_bytes
    if total is None:
        unknown = sorted({t.type_name for t in model.tensors if t.n_bytes is None})
        raise UsageError(f"the model uses tensor types homelab cannot size: {', '.join(unknown)}")
    layout = WeightLayout.of(model)
    n_blocks = layout.n_blocks
    every = tuple(range(n_blocks))
    per_block, experts = [0] * n_blocks, [0] * n_blocks
    in_every = in_every_experts = 0  # groups with one member in each block: added once
    for group in layout.groups:
        size = group.n_bytes
        if cuda:  # the input embedding, which stays on the CPU, is never in a block
            size = cuda_alloc_size(group.ggml_type, group.dims, size)
        if group.blocks == every:
            in_every += size
            in_every_experts += size if group.expert else 0
            continue
        for block in group.blocks:
            per_block[block] += size
            if group.expert:
                experts[block] += size
    embedding = output = 0
    has_output = False
    for tensor in layout.loose:
        size = tensor.n_bytes
        if tensor.embedding:
            embedding += size
            continue
        if cuda:
            size = cuda_alloc_size(tensor.info.ggml_type, tensor.info.shape, size)
        has_output = has_output or tensor.info.name == "output.weight"
        output += size
    if not has_output:
        tied = next((t.info for t in layout.loose if t.info.name.startswith("token_embd.")), None)
        if cuda and tied is not None:
            embedding = cuda_alloc_size(tied.ggml_type, tied.shape, embedding)
        output += embedding  # tied embeddings: llama.cpp loads a device copy for the output head
    if in_every:
        per_block = [size + in_every for size in per_block]
    if in_every_experts:
        experts = [size + in_every_experts for size in experts]
    return WeightPlacement(
        total, output, tuple(per_block), tuple(experts), cuda_padded=cuda, layout=layout
    )
