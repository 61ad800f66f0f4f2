"""The domain calls of a first run: getting a llama-server, and whether the Hub answers.

The rest of :mod:`homelab.ui.backend` (kept apart so that module stays one screenful of
thin calls under the size limit): the same rules, thin calls, no widget touched, each
function may block and runs in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.hub.presets import Preset
    from homelab.plan.options import PlanOptions
    from homelab.serve.preset_fit import PresetFit


# -- getting a llama-server ----------------------------------------------------------------


def locate_engine() -> tuple[Path, str]:
    """The llama-server homelab runs and the rule that found it (``env``, ``setting``,
    ``build:cpu``, ``path``...); ``EngineError`` with the fix when there is none."""
    from homelab.engine.llamacpp.locate import locate_llama_server

    located = locate_llama_server()
    return located.path, located.origin


def check_engine_binary(path: Path, setting: str) -> str:
    """Is ``path`` really a llama-server this machine runs? Its release tag when it is
    (``EngineError`` saying what is wrong with it, naming ``setting``, when not)."""
    from homelab.engine.llamacpp.locate import check_llama_server

    return check_llama_server(path, setting=setting).tag


def use_engine_binary(path: Path | None, setting: str) -> None:
    """Make the domain's locate run ``path`` from now on (None: forget it again)."""
    from homelab.engine.llamacpp.locate import configure_llama_server

    configure_llama_server(path, setting=setting)


def engine_override_name() -> str:
    """The environment variable that wins over a chosen binary (``HOMELAB_LLAMA_SERVER``)."""
    from homelab.engine.llamacpp.locate import ENV_VAR

    return ENV_VAR


def build_engine(progress: Callable[[float | None, str], None]) -> Path:
    """``homelab engine build``: the pinned llama-server, built once (or found built).

    ``progress(fraction or None, line)`` gets the build's lines; raising from it stops the
    build at its next line. Returns the binary's path (``EngineError`` with a hint)."""
    from homelab.engine.llamacpp.build import build_llama_server

    return build_llama_server(progress=progress)


# -- the Hub: does it answer? ----------------------------------------------------------------


def hub_at_start() -> tuple[str, str | None]:
    """The Hub the app talks to (``HF_ENDPOINT`` or huggingface.co), and why it is not
    asked at all (``HF_HUB_OFFLINE`` set) or None. Reads settings only, no network."""
    from homelab.hub.hf_env import endpoint, offline

    return endpoint(), "HF_HUB_OFFLINE is set" if offline() else None


def hub_unreachable(error: BaseException) -> str | None:
    """Why ``error`` says the Hub cannot be had (no network, offline), or None when the Hub
    answered (a refusal or a missing repo is an answer too)."""
    from homelab.hub.errors import HubNetworkError, HubOfflineError

    if isinstance(error, (HubNetworkError, HubOfflineError)):
        return error.message
    return None


def judge_preset_seeing_hub(
    preset: Preset,
    report: GpuReport,
    options: PlanOptions,
    seen: Callable[[str | None], None],
) -> PresetFit:
    """``backend.judge_preset``, telling ``seen`` how its header read went: ``seen(None)``
    when the Hub answered, ``seen(reason)`` when it could not be reached (or is not asked)."""
    from homelab.hub.errors import HubError
    from homelab.hub.model_ref import resolve_model_ref
    from homelab.plan.own_engine import without_own_engines
    from homelab.serve.preset_fit import fit_preset

    def resolve(ref: str) -> GgufModel:
        try:
            resolved = resolve_model_ref(ref)
        except HubError as error:  # any answer the Hub gave, or none
            seen(hub_unreachable(error))
            raise
        seen(resolved.offline_reason)
        return resolved.model

    return fit_preset(preset, without_own_engines(report), options, resolve=resolve)
