"""What a serve's model argument names, made a local file: a path, a preset, a Hub reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from homelab.errors import UsageError
from homelab.serve import events as ev
from homelab.serve.events import SessionEvent

if TYPE_CHECKING:
    from homelab.engine.kinds import EngineKind
    from homelab.hub.presets import Preset
    from homelab.plan.workload import Workload


class Named(NamedTuple):
    """What a serve's model argument names, before anything is pulled."""

    target: str
    """A local file's absolute path, or the Hub reference to pull."""
    local: bool
    workload: Workload | None = None
    """A preset's workload hint."""
    preset: Preset | None = None


def named_model(ref: str, kind: EngineKind) -> Named:
    """What ``ref`` names, nothing pulled: a local file, a Hub reference, or a preset's.

    Raises:
        HomelabError: not a model, an unknown preset, or one for another engine.
    """
    from homelab.gguf.local_path import local_or_ref

    local = local_or_ref(ref)  # a folder, FIFO or /dev/zero raises its own reason (exit 4)
    if local is not None:
        return Named(str(local.absolute()), True)
    if "/" in ref:
        return Named(ref, False)
    from homelab.hub.presets import find_preset

    preset = find_preset(ref)
    if preset.engine != kind.name:
        raise UsageError(
            f"preset {preset.key} runs on {preset.engine}",
            hint=f"serve {preset.repo} with `engine` {preset.engine}",
        )
    return Named(preset.ref, False, preset.workload, preset)


def resolve_model(
    ref: str, kind: EngineKind, emit: Callable[[SessionEvent], None]
) -> tuple[str, Workload | None, str | None]:
    """(the model file's absolute path, a preset's workload hint or None, the preset's key
    or None), pulled into the HF cache when it is not local; the pull and the preset are
    told as events.

    Raises:
        HomelabError: not a model, an unknown preset, one for another engine, a failed pull.
    """
    named = named_model(ref, kind)
    if named.local:
        return named.target, None, None
    if (preset := named.preset) is not None:
        emit(ev.PresetChosen(preset.key, preset.name, preset.ref))
    from homelab.hub.download import pull

    pulled = pull(named.target, progress=lambda p: emit(ev.PullProgress(p)))
    emit(ev.Pulled(str(pulled.paths[0]), pulled.note))
    key = None if named.preset is None else named.preset.key
    return str(Path(pulled.paths[0]).absolute()), named.workload, key
