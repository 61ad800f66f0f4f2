"""A CPU plan's KV cache type and flash attention: the fastest setting RAM allows.

On a card, memory is the limit, so the plan keeps q8_0 (half f16's bytes: twice the
context). In system RAM it rarely is, and speed is: llama.cpp's CPU backend prefills a
q8_0 cache 1.8× slower than f16 (:mod:`homelab.plan.cpu_kv_speed` has the figures and where
they come from). So where a plan is for system RAM and the person gave neither a cache type
nor flash attention, the plan tries the settings fastest first and takes the first whose
plan still gives every slot the workload's context; when none does it keeps the engine's
default (q8_0), and the working says which and why. A setting the person gave is honoured
as given, and a card plan never comes here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from homelab.errors import DoesNotFitError, UsageError
from homelab.plan.cpu_kv_speed import CpuKvSpeeds, KvSetting
from homelab.plan.steps import describe_plan
from homelab.plan.vocabulary import slots_by_tokens

if TYPE_CHECKING:
    from homelab.plan.planner import Plan, PlanRequest


def choose_cpu_kv(
    request: PlanRequest,
    plan_with: Callable[[PlanRequest], Plan],
    whole: Callable[[Plan], bool],
    speeds: CpuKvSpeeds,
) -> Plan:
    """The plan at the fastest setting that serves the request in full (``whole``), else at
    the request's own (the engine's default); ``plan_with`` plans one setting as given."""
    default = KvSetting(request.type_k, request.flash_attn)
    for setting in speeds.fastest():
        if setting == default:
            break
        try:
            plan = plan_with(_asking(request, setting))
        except (DoesNotFitError, UsageError):  # this model or RAM refuses it: the next
            continue
        if whole(plan):
            why = f"KV {setting.label}: {_faster(speeds, setting, default)}; RAM allows it"
            return _said(plan, why + _slots(plan, request, plan_with), speeds)
    plan = plan_with(replace(request, kv_asked=True))
    best = speeds.fastest()[:1]
    if best and best[0] != default:
        why = (
            f"KV {default.label}: {best[0].label} would be faster "
            f"({_faster(speeds, best[0], default)}), but the workload's context does not fit "
            f"in RAM with it (f16 takes twice q8_0's bytes)"
        )
    else:
        why = f"KV {default.label}: the fastest prefill of the settings compared, {speeds.source}"
    return _said(plan, why, speeds)


def _slots(plan: Plan, request: PlanRequest, plan_with: Callable[[PlanRequest], Plan]) -> str:
    """`` (3 slots × 100,096 tokens; q8_0 would hold 6)``: what the speed costs in slots."""
    slots, per_slot = plan.settings.n_seq, plan.candidate.allocation.ctx_per_slot
    said = f" ({slots_by_tokens(slots, per_slot)}"
    try:
        default = plan_with(replace(request, kv_asked=True))
    except (DoesNotFitError, UsageError):
        return said + ")"
    if default.settings.n_seq != slots:
        said += f"; {request.type_k} would hold {default.settings.n_seq} slower ones"
    return said + ")"


def _asking(request: PlanRequest, setting: KvSetting) -> PlanRequest:
    return replace(
        request,
        type_k=setting.cache_type,
        type_v=setting.cache_type,
        flash_attn=setting.flash_attn,
        kv_asked=True,
    )


def _faster(speeds: CpuKvSpeeds, faster: KvSetting, slower: KvSetting) -> str:
    """``1.8× faster prefill than q8_0 + FA on (254 vs 142 prompt tokens/s), <source>``."""
    a, b = speeds.speeds[faster], speeds.speeds.get(slower)
    if b is None:
        return f"the fastest prefill measured ({a.prefill:,.0f} prompt tokens/s), {speeds.source}"
    figures = f"{a.prefill:,.0f} vs {b.prefill:,.0f} prompt tokens/s"
    if a.decode is not None and b.decode is not None:
        figures += f"; decode {a.decode:,.0f} vs {b.decode:,.0f} tokens/s"
    ratio = speeds.ratio(faster, slower)
    return f"{ratio:.1f}× faster prefill than {slower.label} ({figures}), {speeds.source}"


def _said(plan: Plan, why: str, speeds: CpuKvSpeeds) -> Plan:
    said = replace(plan, kv_choice=why, warnings=(*speeds.notes, *plan.warnings))
    return replace(said, steps=tuple(describe_plan(said)))
