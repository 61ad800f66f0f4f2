"""Prepare a serve: one model planned on one card, once, the same for every front-end.

``homelab plan`` renders a :class:`Prepared`, ``homelab serve --dry-run`` prints the same,
the TUI's preview is one, and the serve session prepares the model it serves (after pulling
it) and its heal and re-plan prepare again with new options. :func:`prepare` is the one
planning pass, through the engine kind (:meth:`~homelab.engine.kinds.EngineKind.plan`): the
card, the budget, the stored misses and calibration of the engine build found here, the RPC
workers the options name, the prompt cache under an engine memory limit, the plan and its
working, then the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from homelab.engine.kinds import EngineKind, ServePlan, engine_kind
from homelab.gpu.report import GpuReport
from homelab.plan.options import PlanOptions
from homelab.plan.workload import Workload


@dataclass(frozen=True, slots=True)
class Prepared:
    """A model planned on a card with the options asked: what to show and what to start."""

    kind: EngineKind
    plan: ServePlan
    """The engine's plan, its facts and environment."""
    argv: tuple[str, ...]
    """The engine's command line as shown (the port asked, else the engine's default), with
    the program's name: the session starts the binary it finds with the same flags."""


def prepare(
    model: str,
    report: GpuReport | None,
    options: PlanOptions,
    *,
    default_workload: Workload | None = None,
    served_name: str | None = None,
) -> Prepared:
    """``model`` (a path, a Hub reference for llama.cpp, a folder or repo for vLLM) planned on
    ``report`` (None: the card ``options`` name) by the engine ``options`` ask for;
    ``served_name``: a preset's key, the id it is served by (None: the model's own).

    Raises:
        HomelabError: the model cannot be read, or nothing worth serving fits.
    """
    from homelab.plan.card import card_for

    kind = engine_kind(options.engine.name)
    card = card_for(options) if report is None else report
    plan = kind.plan(model, card, options, default_workload=default_workload)
    if served_name is not None:
        plan = replace(plan, served_name=served_name)
    port = kind.default_port if options.engine.port is None else options.engine.port
    return Prepared(kind, plan, tuple(kind.argv(plan, port, None)))
