"""A MoE model's routed experts in system RAM with vLLM: ``--cpu-offload-gb`` with
``--cpu-offload-params experts``, priced from the checkpoint's tensor table.

What vLLM 0.32 offers (``vllm/config/offload.py``, ``vllm/model_executor/offloader/uva.py``,
``make_layers`` in ``vllm/model_executor/models/utils.py``): the UVA offloader walks the
decoder layers in order, 0 first, and moves parameters to pinned system RAM one by one
while the bytes moved are below ``int(cpu_offload_gb × 2**30)``; with ``cpu_offload_params``
only parameters whose dotted name holds one of those *segments* move (``experts`` takes
``mlp.experts.w13_weight`` and ``mlp.experts.w2_weight``, not ``shared_experts``). So the
experts of the first N layers stay in RAM exactly when ``cpu_offload_gb`` is their bytes in
GiB: the walk stops right after the last of them. Attention, shared experts, the router and
the whole KV cache stay on the card, as with llama.cpp's ``--n-cpu-moe N``.

The cost is not llama.cpp's: vLLM does not compute the experts on the CPU; the card reads
them from pinned RAM over PCIe (UVA, zero-copy) in every forward pass, the routed ones of
each token, nearly all of them in a long prefill. And the RAM is pinned (locked), never
paged out: it must be free.

The bytes come from the top-level ``*.safetensors`` headers (names, dtypes, offsets): a
float tensor counts at the dtype vLLM loads it in, anything else (FP8, MXFP4 blocks and
scales) as stored; vLLM's fused ``w13``/``w2`` hold the same elements as the checkpoint's
``gate``/``up``/``down``.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.errors import DoesNotFitError, ModelFileError, UsageError
from homelab.gpu.report import CpuMemory
from homelab.plan.placement import EVERY_BLOCK
from homelab.plan.vllm.files import json_object
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.vllm.config import ModelConfig

EXPERTS_SEGMENT = "experts"
"""The ``--cpu-offload-params`` segment homelab passes: the routed experts, nothing else."""
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_FLOATS = {"F16": 2, "BF16": 2, "F32": 4, "F64": 8}
MAX_HEADER = 100 << 20
"""A safetensors header larger than this is not one (the format caps it at 100 MB)."""


@dataclass(frozen=True, slots=True)
class ExpertOffload:
    """The routed experts vLLM keeps in system RAM, in bytes."""

    n_layers: int
    """Leading decoder layers whose experts stay in RAM."""
    per_layer: tuple[int, ...]
    """Every layer's routed-expert bytes (0 for a dense layer)."""

    @property
    def bytes(self) -> int:
        return sum(self.per_layer[: self.n_layers])

    @property
    def gb_flag(self) -> str:
        """``--cpu-offload-gb``'s value: the bytes in GiB, written so that vLLM's
        ``int(gb × 2**30)`` gives them back exactly (a power-of-two division is exact)."""
        return repr(self.bytes / 2**30)


def _header(path: Path) -> dict[str, Any]:
    """The safetensors header: a little-endian u64 size, then that many bytes of JSON."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            (size,) = struct.unpack("<Q", head) if len(head) == 8 else (0,)
            raw = f.read(size) if 0 < size <= MAX_HEADER else b""
    except OSError as error:
        raise ModelFileError(f"cannot read {path}: {error.strerror or error}") from None
    if not raw:
        raise ModelFileError(f"{path} has no readable safetensors header (size {size})")
    return json_object(raw, path)


def experts_per_layer(model: ModelConfig) -> tuple[int, ...]:
    """Each decoder layer's routed-expert bytes as vLLM will hold them.

    Raises:
        ModelFileError: the shards are not on disk (only an index), or a header is unreadable.
    """
    if model.weights.source != "safetensors":
        raise ModelFileError(
            f"{model.name}: which bytes are experts is read from the safetensors headers, and "
            f"there are no safetensors shards on disk ({model.weights.source})",
            hint="Download the model's *.safetensors first.",
        )
    per_layer = [0] * model.n_layers
    for name, _ in model.weights.files:
        for tensor, info in _header(model.directory / name).items():
            layer = _LAYER.search(tensor)
            if layer is None or EXPERTS_SEGMENT not in tensor.split("."):
                continue
            index = int(layer.group(1))
            if not isinstance(info, dict) or index >= len(per_layer):
                continue  # an extra block vLLM does not load as a decoder layer (MTP)
            start, end = info.get("data_offsets", (0, 0))
            stored = int(end) - int(start)
            element = _FLOATS.get(str(info.get("dtype")))
            elements = math.prod(int(n) for n in info.get("shape", ()))
            per_layer[index] += elements * model.dtype_bytes if element else stored
    return tuple(per_layer)


def offload_experts(
    model: ModelConfig, asked: int, ram: CpuMemory | None
) -> tuple[ExpertOffload, list[str]]:
    """The experts of the first ``asked`` layers in RAM (clamped to the layer count, as
    llama.cpp's ``--n-cpu-moe`` is), and what to say about it; ``ram`` is the system RAM
    the pinned copy must fit in (None: it could not be read, and the plan says so).

    Raises:
        UsageError: the model has no routed experts.
        DoesNotFitError: the pinned experts need more RAM than is available.
        ModelFileError: see :func:`experts_per_layer`.
    """
    if model.moe is None:
        raise UsageError(
            f"{model.name} has no routed experts: there is nothing to keep in system RAM",
            hint="Drop --n-cpu-moe / --cpu-moe; vLLM's --cpu-offload-gb alone would move "
            "whatever weights come first, which homelab does not plan.",
        )
    per_layer = experts_per_layer(model)
    if not any(per_layer):
        raise UsageError(
            f"{model.name}'s config names experts, but no tensor of its checkpoint has an "
            f"'{EXPERTS_SEGMENT}' segment for vLLM's --cpu-offload-params to take",
            hint="Drop --n-cpu-moe / --cpu-moe for this model.",
        )
    n = min(asked, model.n_layers)
    offload = ExpertOffload(n, per_layer)
    if ram is not None and offload.bytes > ram.available:
        raise DoesNotFitError(
            f"vLLM would pin the routed experts of {n} layer(s) ({format_bytes(offload.bytes)}) "
            f"in system RAM, and {format_bytes(ram.available)} is available",
            hint="Keep fewer layers' experts in RAM (a smaller --n-cpu-moe), free RAM, or use a "
            "quantized checkpoint.",
            short_by=offload.bytes - ram.available,
        )
    notes = [
        f"vLLM keeps the routed experts of {n} layer(s) ({offload.bytes:,} bytes) in pinned "
        "system RAM (--cpu-offload-gb with --cpu-offload-params experts): the card reads them "
        "over PCIe in every forward pass (vLLM does not compute them on the CPU, as llama.cpp's "
        "--n-cpu-moe does); that RAM is locked while vLLM runs."
    ]
    if ram is None:
        notes.append(
            "System RAM could not be read (psutil failed), so whether it holds the pinned "
            "experts was not checked."
        )
    if model.n_layers < asked != EVERY_BLOCK:
        notes.append(
            f"The experts of {asked} layers were asked for; {model.name} has {model.n_layers}, "
            "so every layer's are."
        )
    return offload, notes
