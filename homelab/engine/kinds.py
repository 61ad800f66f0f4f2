"""The engines homelab runs, one shape each: a registry of engine kinds (llama.cpp, vLLM).

Everything that differs between engines is asked of its :class:`EngineKind` (found by
its one name with :func:`engine_kind`): how to plan a model on a card, the command line
from that plan, the supervisor's readiness profile, how to read its log (and its
out-of-memory lines, for the heal), whether it restarts into a new plan in place, the
client for its live status. No front-end tells engines apart by comparing strings or sniffing flags
back out of a command line; the plan's facts (:class:`~homelab.engine.supervision.facts.PlanFacts`)
say what a running engine holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from homelab.engine.supervision.facts import PlanFacts
from homelab.errors import EngineError, UsageError

if TYPE_CHECKING:
    from homelab.engine.supervision.failure import EngineFailure
    from homelab.engine.supervision.readiness import EngineProfile
    from homelab.gpu.report import GpuReport
    from homelab.plan.options import PlanOptions
    from homelab.plan.workload import Workload


@dataclass(frozen=True, slots=True)
class ServePlan:
    """A plan ready to serve, whatever the engine: the engine's own plan and its facts."""

    kind: str
    """The engine kind's name."""
    plan: Any
    """The engine's plan (:class:`~homelab.plan.planner.Plan` or ``VllmPlan``)."""
    model_path: str
    """What the engine loads (a .gguf path, a model folder)."""
    facts: PlanFacts
    model: Any = None
    """The parsed model, when the kind read one (llama.cpp: the GGUF header)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for the engine (vLLM: the one card it may see)."""
    cache_ram_mib: int | None = None
    """llama.cpp's ``--cache-ram`` under an engine memory limit; None: the engine's default."""
    fetch_args: tuple[str, ...] = ()
    """How the engine fetches a model not downloaded yet (llama.cpp: ``-hf REPO:QUANT``), in
    place of loading ``model_path``; empty: it loads ``model_path``."""


@dataclass(frozen=True, slots=True)
class Measured:
    """Predicted vs actual memory from a start-up log, and what calibration made of it."""

    rows: tuple[Any, ...]
    """:class:`~homelab.engine.llamacpp.actuals.ActualRow` per buffer."""
    recorded_compute: int | None
    """The measured compute buffer stored for the next plan (bytes); None when not recorded."""
    not_recorded: str | None = None
    """Why it was not recorded."""


DEFAULT_PORT = 8080
"""Where llama.cpp listens unless told (and where ``serve``'s gate takes the public port)."""


@dataclass(frozen=True, slots=True)
class OomReading:
    """How an engine's log says it ran out of memory: what the heal and the proof read."""

    is_oom: Callable[[EngineFailure | None, Iterable[str]], bool]
    """True when the failure (or a line of the attempt's log) is an out-of-memory."""
    oom_lines: Callable[[Iterable[str]], list[str]]
    """The lines that say an allocation failed that costs the engine its work."""
    heal_line: Callable[[str], bool]
    """True when a line says such an allocation failed."""
    prompt_cache_line: Callable[[str], bool]
    """True when a line says the prompt cache could not take a slot's state."""
    strip_prefix: Callable[[str], str]
    """A log line without the engine's prefix, as a person reads it."""


class EngineKind(Protocol):
    """One engine homelab can plan and run."""

    name: str
    """The one name ("llama.cpp", "vllm"): records, presets and plan options use it."""
    program: str
    """The program as messages name it ("llama-server", "vllm")."""
    default_port: int
    pulls: bool
    """Models come from the Hub (presets, REPO:QUANT) and are pulled before planning."""
    default_cache_type: str
    """The KV cache type planned where the person sets none."""
    takes_rpc_workers: bool
    """It spreads layers over RPC workers (``homelab worker`` on other machines)."""
    loads_gguf: bool
    """Its models are GGUF files (the TUI lists and previews those)."""
    fails_past_pool: bool
    """A request the unified KV pool cannot hold at the moment fails (rather than waits
    for the engine's own scheduler): a gate must queue requests in front of it."""
    benched: bool
    """The bench measures it (it speaks llama-server's endpoints)."""
    restarts_in_place: bool
    """A running engine restarts into a new plan under the same supervisor (else it is
    stopped and started)."""

    @property
    def oom(self) -> OomReading | None:
        """How its log says it ran out of memory; None: the kind is not healed."""
        ...

    def plan(
        self,
        model: str,
        report: GpuReport,
        options: PlanOptions,
        *,
        default_workload: Workload | None = None,
    ) -> ServePlan:
        """Plan ``model`` on ``report``'s card as ``options`` say."""
        ...

    def executable(self) -> str:
        """The engine program's path. Raises EngineError when it is not installed."""
        ...

    def argv(self, plan: ServePlan, port: int, executable: str | None) -> list[str]:
        """The engine's command line for ``plan`` on loopback ``port``, run as ``executable``
        (None: as a plan shows it, with the program's name and no probe of the binary)."""
        ...

    def profile(self, plan: ServePlan | None, model: str) -> EngineProfile:
        """The supervisor's view of this engine (failure hints from ``plan`` when given)."""
        ...

    def read_log(self, lines: Sequence[str]) -> Any:
        """The engine's start-up log, parsed."""
        ...

    def status_client(self, url: str, timeout_s: float) -> Any:
        """A live-status client for the engine at ``url`` (a context manager), or None."""
        ...

    def measure(self, plan: ServePlan, lines: Sequence[str], executable: str) -> Measured | None:
        """Predicted vs actual from the load log, calibration recorded; None when the kind
        measures nothing."""
        ...

    def logged_kv_tokens(self, lines: Sequence[str]) -> int | None:
        """The KV cache in tokens, as the engine's log says it allocated (None: not said)."""
        ...

    def served_facts(self, facts: PlanFacts | None, lines: Sequence[str]) -> PlanFacts | None:
        """The plan's facts with what the start-up log measured in place of the estimate
        (the gate's budget comes from these)."""
        ...


class LlamaCpp:
    """llama.cpp's llama-server: GGUF models, byte-exact KV planning."""

    name = "llama.cpp"
    program = "llama-server"
    default_port = DEFAULT_PORT
    pulls = True
    default_cache_type = "q8_0"
    takes_rpc_workers = True
    loads_gguf = True
    fails_past_pool = True
    benched = True
    restarts_in_place = True

    @property
    def oom(self) -> OomReading:
        from homelab.engine.llamacpp import diagnose, oom

        return OomReading(
            oom.is_oom, oom.oom_lines, oom.heal_line, oom.prompt_cache_line, diagnose.strip_prefix
        )

    def plan(self, model, report, options, *, default_workload=None) -> ServePlan:
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
            remote=query_workers(options.card.rpc) if options.card.rpc else (),
        )
        s, alloc = plan.settings, plan.candidate.allocation
        facts = PlanFacts(
            slots=s.n_seq,
            ctx_total=alloc.n_ctx,
            ctx_per_slot=alloc.ctx_per_slot,
            kv_tokens=alloc.n_ctx,
            unified=s.unified,
            cache_type_k=s.type_k,
            cache_type_v=s.type_v,
        )
        pinned = any(d.device.pin and d.device.cuda for d in plan.devices)
        env = dict(CUDA_ORDER_ENV) if pinned else {}
        plan, cache_ram = sized_cache_ram(plan, options)
        return ServePlan(self.name, plan, label, facts, parsed, env, cache_ram, fetch_args)

    def executable(self) -> str:
        from homelab.engine.llamacpp.locate import find_llama_server

        return str(find_llama_server())

    def argv(self, plan: ServePlan, port: int, executable: str | None) -> list[str]:
        from homelab.engine.llamacpp.argv import llama_server_argv
        from homelab.engine.llamacpp.visible_devices import visible_devices

        argv = llama_server_argv(
            plan.plan,
            port=port,
            model_args=list(plan.fetch_args) or None,
            visible=None if executable is None else visible_devices(executable),
            cache_ram_mib=plan.cache_ram_mib,
        )
        return argv if executable is None else [executable, *argv[1:]]

    def profile(self, plan: ServePlan | None, model: str) -> EngineProfile:
        from homelab.engine.llamacpp.diagnose import llama_server_profile

        profile = llama_server_profile(None if plan is None else plan.plan, Path(model).name)
        if plan is None or not plan.env:
            return profile
        return replace(profile, env={**profile.env, **plan.env})

    def read_log(self, lines: Sequence[str]) -> Any:
        from homelab.engine.llamacpp.log import parse_load_log

        return parse_load_log("\n".join(lines))

    def status_client(self, url: str, timeout_s: float) -> Any:
        from homelab.engine.llamacpp.client import LlamaServerClient

        return LlamaServerClient(url, timeout_s=timeout_s)

    def measure(self, plan: ServePlan, lines: Sequence[str], executable: str) -> Measured | None:
        from homelab.engine.llamacpp.actuals import compare
        from homelab.engine.llamacpp.calibrate import record
        from homelab.engine.llamacpp.locate import engine_version
        from homelab.plan.calibration import CalibrationError

        load_log = self.read_log(lines)
        rows = compare(plan.plan, load_log)
        try:
            calibration = record(
                plan.plan, load_log, engine_version(Path(executable)), model=plan.model
            )
        except CalibrationError as error:
            return Measured(rows, None, error.message)
        return Measured(rows, calibration.compute)

    def logged_kv_tokens(self, lines: Sequence[str]) -> int | None:
        return self.read_log(lines).context.n_ctx

    def served_facts(self, facts: PlanFacts | None, lines: Sequence[str]) -> PlanFacts | None:
        return facts  # llama-server allocates exactly the planned cells


class Vllm:
    """vLLM: a model folder (or cached repo), priced before its four-minute boot."""

    name = "vllm"
    program = "vllm"
    default_port = 8000
    pulls = False
    default_cache_type = "auto"
    takes_rpc_workers = False
    loads_gguf = False
    fails_past_pool = False
    benched = False
    restarts_in_place = False
    oom: OomReading | None = None

    def plan(self, model, report, options, *, default_workload=None) -> ServePlan:
        from dataclasses import replace

        from homelab.plan.vllm.plan import plan_vllm

        if options.workload.per_slot is None and default_workload is not None:
            options = replace(
                options, workload=replace(options.workload, per_slot=default_workload)
            )
        plan = plan_vllm(model, report, options)
        facts = PlanFacts(
            slots=plan.max_num_seqs,
            ctx_total=plan.max_model_len,
            ctx_per_slot=plan.max_model_len,
            kv_tokens=plan.predicted_kv_tokens,
            unified=True,
            cache_type_k=plan.kv_cache_dtype,
            cache_type_v=plan.kv_cache_dtype,
        )
        env: dict[str, str] = {}
        if plan.backend == "cpu" and os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            raise UsageError(
                f"VLLM_CPU_KVCACHE_SPACE is set ({os.environ['VLLM_CPU_KVCACHE_SPACE']} GiB): vLLM's CPU "
                "backend would take it over the KV pool homelab priced",
                hint="Unset VLLM_CPU_KVCACHE_SPACE and use the KV cache memory setting instead.",
            )
        if options.card.gpu is not None:
            # vLLM uses the first visible device: show it only the planned one, numbered as
            # NVML numbers cards (PCI bus order), not CUDA's fastest-first order.
            cards = ",".join(str(i) for i in options.card.gpus or ())
            env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": cards}
        return ServePlan(self.name, plan, str(model), facts, env=env)

    def executable(self) -> str:
        from homelab.engine.vllm.locate import find_vllm

        return find_vllm().executable

    def argv(self, plan: ServePlan, port: int, executable: str | None) -> list[str]:
        from homelab.engine.vllm.argv import vllm_argv
        from homelab.engine.vllm.locate import find_vllm

        if executable is None:  # as shown: the vLLM found here, ``vllm`` when none is
            try:
                executable = find_vllm().executable
            except EngineError:
                executable = "vllm"
        return vllm_argv(plan.plan, port=port, executable=executable)

    def profile(self, plan: ServePlan | None, model: str) -> EngineProfile:
        from dataclasses import replace

        from homelab.engine.vllm.profile import vllm_profile

        profile = vllm_profile()
        return profile if plan is None or not plan.env else replace(profile, env=plan.env)

    def read_log(self, lines: Sequence[str]) -> Any:
        from homelab.engine.vllm.log import parse_vllm_log

        return parse_vllm_log("\n".join(lines))

    def status_client(self, url: str, timeout_s: float) -> Any:
        return None  # vLLM's live status is not read yet

    def measure(self, plan: ServePlan, lines: Sequence[str], executable: str) -> Measured | None:
        return None  # its start-up figures are in the log (read_log); not compared yet

    def logged_kv_tokens(self, lines: Sequence[str]) -> int | None:
        from homelab.engine.vllm.log import last_kv_tokens

        return last_kv_tokens(lines)

    def served_facts(self, facts: PlanFacts | None, lines: Sequence[str]) -> PlanFacts | None:
        from dataclasses import replace

        logged = self.logged_kv_tokens(lines)
        return facts if facts is None or logged is None else replace(facts, kv_tokens=logged)


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


KINDS: dict[str, EngineKind] = {kind.name: kind for kind in (LlamaCpp(), Vllm())}
"""Every engine kind, by its one name."""
DEFAULT_ENGINE = LlamaCpp.name
"""The engine homelab plans for and runs unless told."""


def engine_kind(name: str) -> EngineKind:
    """The kind called ``name``.

    Raises:
        UsageError: homelab runs no engine of that name.
    """
    try:
        return KINDS[name]
    except KeyError:
        raise UsageError(
            f"Unknown engine {name!r}: homelab runs {' or '.join(KINDS)}.",
            title="Unknown engine",
        ) from None


def logged_kv_tokens(kind: EngineKind, log_path: str | None) -> int | None:
    """The running engine's KV cache in tokens, read from its log file (None: no log, or
    the log does not say)."""
    if log_path is None:
        return None
    try:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return kind.logged_kv_tokens(text.splitlines())
