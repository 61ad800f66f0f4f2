"""What a serve's model argument names, made a local file: a path, a preset, a Hub reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.errors import UsageError
from homelab.serve import events as ev

if TYPE_CHECKING:
    from homelab.engine.kinds import EngineKind
    from homelab.plan.workload import Workload


def resolve_model(
    ref: str, kind: EngineKind, emit: Callable[[Any], None]
) -> tuple[str, Workload | None]:
    """(the model file's absolute path, a preset's workload hint or None), pulled into the HF
    cache when it is not local; the pull and the preset are told as events.

    Raises:
        HomelabError: not a model, an unknown preset, one for another engine, a failed pull.
    """
    from homelab.gguf.local_path import local_or_ref

    local = local_or_ref(ref)  # a folder, FIFO or /dev/zero raises its own reason (exit 4)
    if local is not None:
        return str(local.absolute()), None
    workload = None
    if "/" not in ref:
        from homelab.hub.presets import find_preset

        preset = find_preset(ref)
        if preset.engine != kind.name:
            raise UsageError(
                f"preset {preset.key} runs on {preset.engine}",
                hint=f"serve {preset.repo} with `engine` {preset.engine}",
            )
        workload = preset.workload
        emit(ev.PresetChosen(preset.key, preset.name, preset.ref))
        ref = preset.ref
    from homelab.hub.download import pull

    pulled = pull(ref, progress=lambda p: emit(ev.PullProgress(p)))
    emit(ev.Pulled(str(pulled.paths[0]), pulled.note))
    return str(Path(pulled.paths[0]).absolute()), workload
