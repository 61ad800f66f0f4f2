"""A preset planned by name, as ``homelab plan PRESET``, ``homelab serve PRESET --dry-run``
and the TUI's preview of a preset not downloaded yet all plan it.

Its header is read as ``homelab plan REPO:QUANT`` reads one (the HF cache, the header cache,
or range reads from the Hub), nothing downloaded; llama-server fetches the model itself
(``-hf REPO:QUANT``). While the Hub cannot be reached (no network, offline), the plan is
made from the preset's own ``[facts]`` and says so (:attr:`PresetPlan.offline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from homelab.errors import HomelabError

if TYPE_CHECKING:
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import GpuReport
    from homelab.hub.presets import Preset
    from homelab.plan.options import PlanOptions
    from homelab.plan.planner import Plan
    from homelab.serve.prepare import Prepared


@dataclass(frozen=True, slots=True)
class PresetPlan:
    """A preset's plan and the engine's command line."""

    plan: Plan
    argv: tuple[str, ...]
    prepared: Prepared | None
    """The planning pass from the model's header; None when the preset's facts stood in."""
    offline: str | None = None
    """Why the Hub could not be had, when the plan is from the preset's facts."""


def hub_unreachable(error: BaseException) -> str | None:
    """Why ``error`` says the Hub cannot be had (no network, offline), or None when the Hub
    answered (a refusal or a missing repo is an answer too)."""
    from homelab.hub.errors import HubNetworkError, HubOfflineError

    if isinstance(error, (HubNetworkError, HubOfflineError)):
        return error.message
    return None


def plan_preset(preset: Preset, report: GpuReport | None, options: PlanOptions) -> PresetPlan:
    """``preset`` planned on ``report`` (None: the card ``options`` name) for its workload
    hint (or the one ``options`` ask for), served by its name.

    Raises:
        HomelabError: the Hub's answer (a refusal, no such quant), nothing fits, or (the Hub
            unreachable) no facts for the preset's quant.
    """
    from homelab.engine.kinds import engine_kind
    from homelab.engine.llamacpp.argv import llama_server_argv
    from homelab.engine.llamacpp.served_id import served_id
    from homelab.plan.card import card_for
    from homelab.serve.prepare import prepare
    from homelab.serve.preset_fit import fit_preset

    card = card_for(options) if report is None else report
    try:
        prepared = prepare(
            preset.ref, card, options, default_workload=preset.workload, served_name=preset.key
        )
        return PresetPlan(prepared.plan.plan, prepared.argv, prepared)
    except HomelabError as error:
        if hub_unreachable(error) is None:
            raise
        offline = error

    def resolve(ref: str) -> GgufModel:
        raise offline  # the header read that just failed: the Hub is not asked again

    fit = fit_preset(preset, card, options, resolve=resolve).fit
    if fit.plan is None:
        raise HomelabError(
            fit.reason or "its header could not be read",
            title=fit.problem or "Cannot plan this preset",
            hint="Download it first (`homelab pull`), or check the network.",
        )
    port = options.engine.port or engine_kind(options.engine.name).default_port
    alias = served_id(None, preset.ref, preset.key)  # the preset's name, as when it is served
    argv = llama_server_argv(fit.plan, port=port, model_args=["-hf", preset.ref], alias=alias)
    return PresetPlan(fit.plan, tuple(argv), None, hub_unreachable(offline))
