"""What a bench result belongs to: (model header hash, engine version, flags, card).

The model, engine version and flags are the calibration key
(:class:`~homelab.plan.calibration_key.CalibrationKey`: one model geometry, one
llama.cpp build, the flags that shape what it runs), made by the same functions the
calibration store uses; the card is added, since speed, unlike memory, depends on it
(``cpu: <model> × <threads>``, or the GPU's name).

A plan gives the key of what it would run (:func:`key_for_plan`); a running engine gives
its own from its record's command line (:func:`key_for_engine`), which homelab wrote from
its plan, so the two agree for the same model, flags and card.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.errors import GpuProbeError, HomelabError
from homelab.plan.calibration_key import CalibrationKey, key_for, key_of, model_identity
from homelab.plan.kv import KvSettings

if TYPE_CHECKING:
    from homelab.engine.supervision.record import EngineRecord
    from homelab.gguf.header import GgufModel
    from homelab.plan.planner import Plan


@dataclass(frozen=True, slots=True)
class BenchKey:
    calibration: CalibrationKey
    card: str

    def as_dict(self) -> dict[str, Any]:
        return {**self.calibration.as_dict(), "card": self.card}

    def digest(self) -> str:
        """A short stable name for the key (the store's file name)."""
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def cpu_card() -> str:
    """This machine's CPU as a card: ``cpu: <model name> × <logical CPUs>``."""
    from homelab.gpu.cpu import cpu_name

    return f"cpu: {cpu_name()}"


_GPU_PREFIX = re.compile(r"^GPU \d+: ")


def key_for_plan(plan: Plan, model: GgufModel, engine_version: str | None) -> BenchKey | None:
    """The key of what ``plan`` would run (None without an engine version)."""
    if not engine_version:
        return None
    card = cpu_card() if plan.budget.kind == "cpu" else _GPU_PREFIX.sub("", plan.budget.name)
    return BenchKey(key_for(plan, model, engine_version), card)


_FLAGS = {
    "-c": "ctx", "--ctx-size": "ctx", "-np": "parallel", "--parallel": "parallel",
    "-ctk": "type_k", "--cache-type-k": "type_k", "-ctv": "type_v", "--cache-type-v": "type_v",
    "-fa": "flash_attn", "--flash-attn": "flash_attn", "-ngl": "ngl", "--n-gpu-layers": "ngl",
    "--gpu-layers": "ngl", "-ub": "ubatch", "--ubatch-size": "ubatch", "-b": "batch",
    "--batch-size": "batch", "-m": "model", "--model": "model",
}  # fmt: skip


def argv_flags(argv: tuple[str, ...] | list[str]) -> dict[str, str | bool]:
    """The flags of a llama-server command line that the key reads (``-kvu`` as a bool)."""
    found: dict[str, str | bool] = {}
    words = list(argv)
    for i, word in enumerate(words):
        if word in ("-kvu", "--kv-unified"):
            found["unified"] = True
        elif word in _FLAGS and i + 1 < len(words):
            found[_FLAGS[word]] = words[i + 1]
    return found


def _gpu_card(pid: int) -> str | None:
    """The name of the card the engine process ``pid`` holds memory on (the only card when
    NVML cannot say); None without a readable card."""
    from homelab.gpu.probe import probe

    try:
        report = probe(window_s=0.0)
    except GpuProbeError:
        return None
    for device in report.devices:
        if any(p.pid == pid for p in device.processes or ()):
            return device.name
    return report.devices[0].name if len(report.devices) == 1 else None


def key_for_engine(
    record: EngineRecord, engine_version: str | None, model_path: str | None = None
) -> BenchKey | None:
    """The key of the engine ``record`` describes (its argv as homelab wrote it); None when
    its model, version or card cannot be known."""
    from homelab.gguf.model_file import read_model

    flags = argv_flags(record.argv)
    path = model_path or flags.get("model")
    if not engine_version or not isinstance(path, str):
        return None
    try:
        identity = model_identity(read_model(Path(path)))
        ngl = str(flags.get("ngl", "all"))
        device = "cpu" if ngl == "0" else "gpu"
        settings = KvSettings(
            n_ctx=int(str(flags.get("ctx", "0"))),
            n_seq=int(str(flags.get("parallel", "1"))),
            unified=flags.get("unified") is True,
            n_ubatch=int(str(flags.get("ubatch", "512"))),
            n_batch=int(str(flags.get("batch", "2048"))),
            type_k=str(flags.get("type_k", "f16")),
            type_v=str(flags.get("type_v", "f16")),
            flash_attn=str(flags.get("flash_attn", "on")) != "off",
        )
    except (HomelabError, ValueError):
        return None
    card = cpu_card() if device == "cpu" else _gpu_card(record.pid)
    if card is None:
        return None
    n_gpu_layers = (
        None if ngl in ("all", "auto", "999", "0") else int(ngl) if ngl.isdigit() else None
    )
    calibration = key_of(
        identity, engine_version, device, settings, n_ctx=settings.n_ctx, n_gpu_layers=n_gpu_layers
    )
    return BenchKey(calibration, card)
