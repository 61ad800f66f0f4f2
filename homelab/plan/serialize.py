"""A plan as one JSON-ready dict: the ``homelab plan --json`` contract, sizes in bytes."""

from __future__ import annotations

from typing import Any

from homelab.plan.budget import DeviceBudget
from homelab.plan.decode_bound import decode_dict
from homelab.plan.placement import plan_ram
from homelab.plan.planner import Plan
from homelab.plan.rung import rung_dict
from homelab.plan.split import DeviceShare
from homelab.plan.working import render_steps


def plan_to_dict(plan: Plan, argv: list[str]) -> dict[str, Any]:
    """The documented keys first (model, weights_bytes, ... argv), then extras;
    ``rung`` says which rung of the offload ladder the plan stands on and why; a plan that
    keeps experts in RAM adds ``n_cpu_moe`` and ``ram`` (routed experts there, every weight
    there, the mapped and repacked buffers and the CPU compute buffer the load log prints,
    the RAM available and the headroom kept), in bytes; an unknown figure is null."""
    g = plan.geometry
    c = plan.candidate
    alloc = c.allocation
    s = c.settings
    b = plan.budget
    engine = c.engine
    data = {
        "model": {
            "path": plan.model_path,
            "arch": g.arch,
            "n_layer": g.n_layer_all,
            "kv_layers": len(g.kv_layers),
            "swa_layers": len(g.swa_layers),
            "recurrent_layers": len(g.recurrent_layers),
            "trained_ctx": g.trained_ctx,
            "n_vocab": g.n_vocab,
            "verified": g.verified,
        },
        "weights_bytes": plan.weights.total,
        "cache_type_k": s.type_k,
        "cache_type_v": s.type_v,
        "kv_bytes_per_token": alloc.bytes_per_token,
        "ctx_size": alloc.n_ctx,
        "parallel": s.n_seq,
        "kv_unified": s.unified,
        "ctx_per_slot": alloc.ctx_per_slot,
        "kv_bytes": alloc.total,
        "kv_breakdown": {
            "full": alloc.full_bytes,
            "swa": alloc.swa_bytes,
            "recurrent": alloc.recurrent_bytes,
            "swa_cells": alloc.swa_cells,
        },
        "tokens_fit": plan.tokens_fit,
        "workload": {
            "name": plan.request.workload.name,
            "tokens_per_slot": plan.request.workload.tokens_per_slot,
        },
        "verdict": plan.verdict,
        "n_gpu_layers": plan.n_gpu_layers,
        "rung": rung_dict(plan),
        "budget": budget_dict(
            b, engine.total, plan.weights_on_device, alloc.total, plan.left_for_conversations
        ),
        "devices": [device_dict(share) for share in plan.devices],
        "engine": {
            "cuda_context": engine.cuda_context,
            "compute_buffer": engine.compute_buffer,
            "fa_scratch": engine.fa_scratch,
            "compute_measured": engine.measured_compute is not None,
        },
        "warnings": list(plan.warnings),
        "steps": render_steps(plan.steps),
        "argv": argv,
    }
    if ram := plan_ram(plan):  # only where experts stay in RAM: other plans' JSON is unchanged
        data["n_cpu_moe"] = ram.n_cpu_moe
        terms: dict[str, int | None] = {"experts": ram.experts, "weights": ram.tensors}
        terms["mapped"] = ram.mapped
        if (check := plan.ram) is not None:  # the RAM side as the load log prints it
            side = check.side
            terms |= {"mapped": side.mapped, "repack": side.repack, "compute": side.compute}
            terms["resident"] = side.resident  # what the RAM check weighs with them
            terms |= {"available": check.available, "headroom": check.headroom}
        data["ram"] = terms
    if plan.decode is not None:  # what it costs in speed, an estimate unless measured
        data["decode"] = decode_dict(plan.decode)
    return data


def budget_dict(b: DeviceBudget, engine: int, weights: int, kv: int, left: int) -> dict[str, Any]:
    """The fields of ``budget`` (and of each entry of ``devices``), in bytes."""
    return {
        "device": b.name,
        "kind": b.kind,
        "total": b.total,
        "reserved": b.reserved,
        "desktop": b.desktop,
        "other": b.other,
        "engine": engine,
        "headroom": b.headroom,
        "weights": weights,
        "kv": kv,
        "left_for_conversations": left,
    }


def device_dict(share: DeviceShare) -> dict[str, Any]:
    """One device's budget (the fields of ``budget``) and what it holds, in bytes."""
    b, e = share.device.budget, share.engine
    left = b.usable - share.weights - (e.total - e.fa_scratch)
    return {
        **budget_dict(b, e.total, share.weights, share.kv, left),
        "llama_device": share.device.llama_name,
        "endpoint": share.device.endpoint,
        "index": share.device.index,
        "first_block": share.first_block,
        "blocks": share.n_blocks,
        "output_layer": share.output,
        "tensor_split": share.layers,
        "spare": share.spare,
    }
