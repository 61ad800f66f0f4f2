"""Calibration keys: which model, which engine, which flags a measurement belongs to.

A measured compute buffer holds for one model geometry, one llama.cpp build and
the flags that shape llama-server's worst-case graph. The key is

- the model: file name, size of its parts, and a SHA-256 of its parsed headers
  (metadata and tensor infos; no file read, so a header read from the hub and
  the downloaded file give the same identity);
- the engine version (``b11312-0c1e57098``);
- the flags: context, slots, micro-batch, batch, K/V cache types, flash
  attention, unified KV, ``-ngl`` (partial offload), the device kind
  (``gpu``/``cpu``) and ``--n-cpu-moe`` (the blocks whose routed experts stay in system
  RAM: the graph then runs their expert matmuls on the CPU, and the card's compute buffer
  is another one). A record stored before that field existed had none: 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.gguf.header import GgufModel, LazyArray
from homelab.plan.kv import KvSettings

if TYPE_CHECKING:
    from homelab.plan.planner import Plan


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Which model: file name, bytes of its parts, SHA-256 of its parsed headers."""

    name: str
    size: int
    header_sha256: str


@dataclass(frozen=True, slots=True)
class CalibrationKey:
    """Model + engine + the flags that change what llama-server allocates besides the KV."""

    model: ModelIdentity
    engine_version: str
    device: str
    ctx: int
    parallel: int
    ubatch: int
    batch: int
    type_k: str
    type_v: str
    flash_attn: bool
    unified: bool
    n_gpu_layers: int | None
    n_cpu_moe: int = 0
    """Blocks whose routed experts stay in RAM (``--n-cpu-moe``, clamped to the block count)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _canonical(value: Any) -> Any:
    """Metadata values as JSON-able data; a lazily read array counts by type and length."""
    if isinstance(value, LazyArray):
        return ["lazy-array", value.item_type, value.count]
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def header_digest(model: GgufModel) -> str:
    """SHA-256 over every part's parsed header: metadata and tensor infos (names, shapes,
    types, offsets). Reads nothing: a remote header and the downloaded file agree."""
    import hashlib  # only when a record exists: OpenSSL's loading is start-up time

    digest = hashlib.sha256()
    for part in model.parts:
        header = {
            "version": part.version,
            "alignment": part.alignment,
            "header_bytes": part.header_bytes,
            "metadata": {k: _canonical(v) for k, v in sorted(part.metadata.items())},
            "tensors": [[t.name, list(t.shape), t.ggml_type, t.offset] for t in part.tensors],
        }
        digest.update(json.dumps(header, sort_keys=True, default=repr).encode("utf-8"))
    return digest.hexdigest()


def model_bytes(model: GgufModel) -> int:
    """Bytes of the model's files as their headers describe them (data offset + tensor data per part)."""
    return sum(part.data_offset + (part.weights_bytes or 0) for part in model.parts)


def model_identity(model: GgufModel) -> ModelIdentity:
    """The model's identity for calibration (see :class:`ModelIdentity`); pure, no I/O."""
    name = Path(model.header.source_name.split("?", 1)[0]).name
    return ModelIdentity(name, model_bytes(model), header_digest(model))


def key_for(plan: Plan, model: GgufModel, engine_version: str) -> CalibrationKey:
    """The calibration key of ``plan`` run by ``engine_version``."""
    return key_of(
        model_identity(model),
        engine_version,
        plan.budget.kind,
        plan.settings,
        n_ctx=plan.candidate.allocation.n_ctx,
        n_gpu_layers=plan.n_gpu_layers,
        n_cpu_moe=plan.weights.n_cpu_moe,
    )


def key_of(
    identity: ModelIdentity,
    engine_version: str,
    device: str,
    settings: KvSettings,
    *,
    n_ctx: int,
    n_gpu_layers: int | None,
    n_cpu_moe: int = 0,
) -> CalibrationKey:
    """The key of one candidate setting (``n_ctx``: the allocated, padded context)."""
    return CalibrationKey(
        model=identity,
        engine_version=engine_version,
        device=device,
        ctx=n_ctx,
        parallel=settings.n_seq,
        ubatch=settings.n_ubatch,
        batch=settings.n_batch,
        type_k=settings.type_k,
        type_v=settings.type_v,
        flash_attn=settings.flash_attn,
        unified=settings.unified,
        n_gpu_layers=n_gpu_layers,
        n_cpu_moe=n_cpu_moe,
    )


def key_from_dict(data: dict[str, Any]) -> CalibrationKey:
    """A key from its :meth:`CalibrationKey.as_dict` form.

    Raises:
        KeyError, TypeError: the data is not a key's.
    """
    fields = dict(data)
    fields["model"] = ModelIdentity(**fields["model"])
    return CalibrationKey(**fields)
