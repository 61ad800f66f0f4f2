"""llama.cpp's engine kind (llama-server), as :class:`~homelab.engine.kinds.EngineKind` asks.

The kinds' shared types are imported where used: the registry imports this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homelab.engine.supervision.facts import PlanFacts

if TYPE_CHECKING:
    from homelab.engine.kinds import Measured, OomReading, ServePlan
    from homelab.engine.supervision.readiness import EngineProfile
    from homelab.plan.judge import Fit
    from homelab.plan.planner import Plan


class LlamaCpp:
    """llama.cpp's llama-server: GGUF models, byte-exact KV planning."""

    name = "llama.cpp"
    program = "llama-server"
    default_port = 8080
    pulls = True
    default_cache_type = "q8_0"
    takes_rpc_workers = True
    keeps_experts_in_ram = True
    loads_gguf = True
    fails_past_pool = True
    benched = True
    restarts_in_place = True
    start_cost: str | None = None

    @property
    def oom(self) -> OomReading:
        from homelab.engine.kinds import OomReading
        from homelab.engine.llamacpp import diagnose, oom

        return OomReading(
            oom.is_oom, oom.oom_lines, oom.heal_line, oom.prompt_cache_line, diagnose.strip_prefix
        )

    def verdict(
        self,
        model,
        label,
        report,
        options,
        *,
        default_workload=None,
        engine_version=None,
        ram=None,
    ) -> Fit:
        """The planner's verdict (``engine_version``: the llama-server build whose stored
        calibration applies, or a callable finding it when needed; None: no calibration)."""
        from homelab.plan.experts_rung import system_ram
        from homelab.plan.judge import judge

        return judge(
            model,
            label,
            report,
            options,
            default_workload=default_workload,
            engine_version=engine_version,
            ram=system_ram if ram is None else ram,
        )

    def plan(self, model, report, options, *, default_workload=None, remote=None) -> ServePlan:
        """``remote``: the RPC devices as the caller already has them (a worker's answer
        replayed); None: ask the workers ``options`` name, now."""
        from homelab.engine.kinds import ServePlan
        from homelab.engine.llamacpp.calibrate import current_engine_version
        from homelab.engine.llamacpp.rpc_query import query_workers
        from homelab.plan.cache_ram import sized_cache_ram
        from homelab.plan.devices import CUDA_ORDER_ENV
        from homelab.plan.pipeline import plan_model

        parsed, label, fetch_args = _read_gguf(model)
        plan = plan_model(
            parsed,
            label,
            report,
            options,
            default_workload=default_workload,
            engine_version=current_engine_version,
            remote=(query_workers(options.card.rpc) if options.card.rpc else ())
            if remote is None
            else remote,
        )
        facts = plan_facts(plan)
        pinned = any(d.device.pin and d.device.cuda for d in plan.devices)
        if pinned:
            _refuse_an_engine_without_a_gpu()
        env = dict(CUDA_ORDER_ENV) if pinned else {}
        plan, cache_ram = sized_cache_ram(plan, options)
        return ServePlan(self.name, plan, label, facts, parsed, env, cache_ram, fetch_args)

    def executable(self) -> str:
        from homelab.engine.llamacpp.locate import find_llama_server

        return str(find_llama_server())

    def argv(self, plan: ServePlan, port: int, executable: str | None) -> list[str]:
        from homelab.engine.llamacpp.argv import llama_server_argv
        from homelab.engine.llamacpp.served_id import served_id
        from homelab.engine.llamacpp.visible_devices import visible_devices

        metadata = getattr(plan.model, "metadata", None)
        argv = llama_server_argv(
            plan.plan,
            port=port,
            model_args=list(plan.fetch_args) or None,
            visible=None if executable is None else visible_devices(executable),
            cache_ram_mib=plan.cache_ram_mib,
            alias=served_id(
                metadata if isinstance(metadata, dict) else None, plan.model_path, plan.served_name
            ),
        )
        return argv if executable is None else [executable, *argv[1:]]

    def profile(self, plan: ServePlan | None, model: str) -> EngineProfile:
        from homelab.engine.llamacpp.diagnose import llama_server_profile

        profile = llama_server_profile(None if plan is None else plan.plan, Path(model).name)
        if plan is None or not plan.env:
            return profile
        return replace(profile, env={**profile.env, **plan.env})

    def status_client(self, url: str, timeout_s: float, api_key: str | None = None) -> Any:
        from homelab.engine.llamacpp.client import LlamaServerClient

        return LlamaServerClient(url, timeout_s=timeout_s, api_key=api_key)

    def measure(self, plan: ServePlan, lines: Sequence[str], executable: str) -> Measured | None:
        from homelab.engine.kinds import Measured
        from homelab.engine.llamacpp.actuals import compare, format_actuals
        from homelab.engine.llamacpp.calibrate import record
        from homelab.engine.llamacpp.locate import engine_version
        from homelab.engine.llamacpp.log import parse_load_log
        from homelab.plan.calibration import CalibrationError

        load_log = parse_load_log("\n".join(lines))
        rows = compare(plan.plan, load_log)
        try:
            calibration = record(
                plan.plan, load_log, engine_version(Path(executable)), model=plan.model
            )
        except CalibrationError as error:
            return Measured(rows, format_actuals(rows), None, error.message)
        return Measured(rows, format_actuals(rows), calibration.compute)

    def logged_kv_tokens(self, lines: Sequence[str]) -> int | None:
        from homelab.engine.llamacpp.log import parse_load_log

        return parse_load_log("\n".join(lines)).context.n_ctx

    def served_facts(self, facts: PlanFacts | None, lines: Sequence[str]) -> PlanFacts | None:
        return facts  # llama-server allocates exactly the planned cells

    def backend(self, executable: str) -> str | None:
        from homelab.engine.llamacpp.backend import backend_of

        found = backend_of(Path(executable))
        return None if found is None else found.describe()


def _refuse_an_engine_without_a_gpu() -> None:
    """A plan for a card NVML reports is refused when the engine found here has no GPU
    backend (it would run the card's plan on the CPU); none found yet is the start's to say."""
    from homelab.engine.llamacpp.backend import check_gpu_backend
    from homelab.engine.llamacpp.locate import find_llama_server
    from homelab.errors import EngineError

    try:
        executable = find_llama_server()
    except EngineError:
        return
    check_gpu_backend(executable)


def _read_gguf(model: str) -> tuple[Any, str, tuple[str, ...]]:
    """(the GGUF header, the path the plan names, llama-server's fetch flags) for ``model``:
    a local file as written, or a Hub reference read remotely, nothing downloaded."""
    from homelab.gguf.local_path import local_or_ref
    from homelab.gguf.model_file import read_model

    local = local_or_ref(model)
    if local is not None:
        return read_model(local), model, ()
    from homelab.hub.model_ref import resolve_model_ref  # the Hub only for a Hub reference

    resolved = resolve_model_ref(model)
    fetch = () if resolved.is_downloaded else _hf_args(resolved)
    return resolved.model, resolved.display, fetch


def _hf_args(resolved: Any) -> tuple[str, ...]:
    """How llama-server itself fetches a model not downloaded yet: ``-hf REPO:QUANT``
    (into the same HF cache), or ``-hfr REPO -hff FILE`` when the file has no quant tag."""
    ref, choice = resolved.ref, resolved.choice
    if choice is not None and choice.tag:
        return ("-hf", f"{ref.repo}:{choice.tag}")
    filename = choice.primary.path if choice is not None else ref.filename
    return ("-hfr", str(ref.repo), "-hff", str(filename))


def plan_facts(plan: Plan) -> PlanFacts:
    """What llama.cpp's ``plan`` gives its engine (slots, context, KV cells, cache types)."""
    s, alloc = plan.settings, plan.candidate.allocation
    return PlanFacts(
        slots=s.n_seq,
        ctx_total=alloc.n_ctx,
        ctx_per_slot=alloc.ctx_per_slot,
        kv_tokens=alloc.n_ctx,
        unified=s.unified,
        cache_type_k=s.type_k,
        cache_type_v=s.type_v,
    )
