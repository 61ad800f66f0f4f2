"""Plan one model on one card with llama.cpp: the calibration store inside the pass.

Every front-end reaches it through the application layer's one planning pass
(:func:`homelab.serve.prepare.prepare`, by way of the llama.cpp engine kind) or, to judge
many models at once, through :func:`homelab.plan.judge.judge`. The compute buffers earlier
runs measured price the candidates; a launch that ran out of memory before narrows the
request once more (:func:`~homelab.plan.calibration_miss.avoid_misses`: which miss applies
is known only from the plan it would give, the card, flash attention and batch it chose).
The plan is then priced in decode speed (:mod:`homelab.plan.decode_bound`) with the card's
bandwidth and system RAM's stored measurement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from homelab.gguf.header import GgufModel
from homelab.gpu import ram_bandwidth
from homelab.gpu.cpu import cpu_name
from homelab.gpu.report import CpuMemory, GpuReport
from homelab.plan.calibration import EngineVersion, measurements_for
from homelab.plan.cpu_kv_speed import FINDING, load_speeds
from homelab.plan.decode_bound import with_decode_bound
from homelab.plan.experts_rung import system_ram
from homelab.plan.options import PlanOptions
from homelab.plan.planner import Plan, PlanRequest, make_plan
from homelab.plan.remote_device import RemoteDevice
from homelab.plan.workload import Workload


def plan_model(
    model: GgufModel,
    label: str,
    report: GpuReport,
    options: PlanOptions,
    *,
    default_workload: Workload | None = None,
    engine_version: EngineVersion = None,
    remote: tuple[RemoteDevice, ...] = (),
    ram: Callable[[], CpuMemory | None] = system_ram,
) -> Plan:
    """The llama.cpp plan for ``model`` (shown as ``label``) on ``report``'s card.

    ``engine_version`` is the llama-server build the plan is for (a tag, or a function
    giving it, called only when the store holds a record of this model; the engine kind
    passes the build it runs): its measured compute
    buffers price the candidates whose flags they were measured at, and a launch that ran
    out of memory before keeps the plan at the setting that then held
    (:mod:`homelab.plan.calibration_miss`). None: estimates only.

    ``remote`` are RPC devices (llama.cpp's ``rpc-server`` on other hosts) the plan may
    place layers on, budgeted like cards and split over with the local ones; the argv
    then carries ``--rpc`` and the devices in llama-server's order. ``ram`` gives the system
    RAM the offload ladder weighs its RAM side against (psutil's, unless a caller holds it).

    With no cache type asked, a plan for system RAM takes the fastest setting RAM allows,
    by the speeds measured on this CPU (``bench/bench_cpu_kv.py --store``) or the
    documented finding (:mod:`homelab.plan.cpu_kv_speed`).

    Raises:
        DoesNotFitError: nothing worth serving fits (the message says what would).
        UsageError: the options ask for something impossible (e.g. slots > context).
        ModelFileError: the header's geometry is not one llama.cpp could load.
    """
    request = options.request(default_workload)
    if engine_version is not None and request.measured_compute is None:
        measured = measurements_for(model, engine_version)
        if measured is not None:
            request = replace(request, calibration=measured)
    on_card = bool(report.devices or remote)  # the store is read only for a RAM plan's choice
    speeds = FINDING if request.kv_asked or on_card else load_speeds(cpu_name())
    plan = make_plan(model, label, report, request, remote=remote, ram=ram, kv_speeds=speeds)
    if engine_version is not None:
        from homelab.plan.calibration_miss import avoid_misses  # an earlier OOM

        def replan(narrowed: PlanRequest) -> Plan:
            return make_plan(
                model, label, report, narrowed, remote=remote, ram=ram, kv_speeds=speeds
            )

        limit = options.engine.memory_limit
        plan = avoid_misses(plan, model, request, engine_version, limit, replan)
    return with_decode_bound(plan, model, report, ram_bandwidth.load())
