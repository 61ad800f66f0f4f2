"""Plan one model on one card: the single planning path every front-end uses.

``homelab plan``, ``serve``, ``quants``, ``presets`` and the TUI's menu all call
:func:`plan_model`; the calibration store (compute buffers measured by earlier runs) is
consulted here, so no front-end plans twice or forgets it.
"""

from __future__ import annotations

from homelab.gguf.header import GgufModel
from homelab.gpu.report import GpuReport
from homelab.plan.options import PlanOptions
from homelab.plan.planner import Plan, make_plan
from homelab.plan.workload import Workload


def plan_model(
    model: GgufModel,
    label: str,
    report: GpuReport,
    options: PlanOptions,
    *,
    default_workload: Workload | None = None,
) -> Plan:
    """The llama.cpp plan for ``model`` (shown as ``label``) on ``report``'s card.

    Raises:
        DoesNotFitError: nothing worth serving fits (the message says what would).
        UsageError: the options ask for something impossible (e.g. slots > context).
        ModelFileError: the header's geometry is not one llama.cpp could load.
    """
    from homelab.plan.calibration import apply_calibration

    plan = make_plan(model, label, report, options.request(default_workload))
    return apply_calibration(plan, model, report)
