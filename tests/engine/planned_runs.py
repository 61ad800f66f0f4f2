"""Helpers for tests that run the planner's own argv in the real llama-server.

Import as ``from tests.engine.planned_runs import ...`` (pytest run from the repository root,
like ``tests.factory``); not a test module itself.
"""

from __future__ import annotations

from pathlib import Path

from homelab.engine.llamacpp.argv import llama_server_argv
from homelab.engine.llamacpp.log import LoadLog, parse_load_log
from homelab.gguf.model_file import read_model
from homelab.gpu.cpu import cpu_report
from homelab.plan.planner import Plan, PlanRequest, make_plan
from tests.factory.server_log import capture_load_log

# capture_load_log supplies these itself (model, a free port, -lv 4).
_SUPPLIED = {"-m", "--host", "--port", "-lv"}


def cpu_plan(model: Path, *, ctx: int = 4096, parallel: int = 2, **request: object) -> Plan:
    """A plan for system RAM (no GPU) with an explicit context and slot count."""
    report = cpu_report("tests: planning against system RAM")
    wanted = PlanRequest(ctx=ctx, parallel=parallel, **request)  # type: ignore[arg-type]
    return make_plan(read_model(model), str(model), report, wanted)


def engine_args(argv: list[str]) -> list[str]:
    """The planner's argv minus the program and the options capture_load_log adds itself."""
    args: list[str] = []
    rest = iter(argv[1:])
    for arg in rest:
        if arg in _SUPPLIED:
            next(rest)
            continue
        args.append(arg)
    return args


def run_plan(binary: Path, plan: Plan) -> tuple[list[str], LoadLog]:
    """Start llama-server with the plan's argv until it listens; (engine args, parsed log)."""
    args = engine_args(llama_server_argv(plan))
    text = capture_load_log(binary, Path(plan.model_path), args)
    return args, parse_load_log(text)
