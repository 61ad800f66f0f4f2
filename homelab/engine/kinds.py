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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from homelab.engine.llamacpp.kind import LlamaCpp
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.vllm.kind import Vllm
from homelab.errors import UsageError

if TYPE_CHECKING:
    from homelab.engine.supervision.failure import EngineFailure
    from homelab.engine.supervision.readiness import EngineProfile
    from homelab.errors import HomelabError
    from homelab.gguf.header import GgufModel
    from homelab.gpu.report import CpuMemory, GpuReport
    from homelab.plan.calibration import EngineVersion
    from homelab.plan.judge import Fit
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
    served_name: str | None = None
    """The name to serve the model by (a preset's key: ``homelab serve KEY``); None: the
    engine's id from the model itself. Cleaned into an id by the kind's argv."""


@dataclass(frozen=True, slots=True)
class Measured:
    """Predicted vs actual memory from a start-up log, and what calibration made of it."""

    rows: tuple[Any, ...]
    """:class:`~homelab.engine.llamacpp.actuals.ActualRow` per buffer."""
    table: str
    """The rows as a small aligned table for a person (the engine's own wording of them)."""
    recorded_compute: int | None
    """The measured compute buffer stored for the next plan (bytes); None when not recorded."""
    not_recorded: str | None = None
    """Why it was not recorded."""


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
    keeps_experts_in_ram: bool
    """It keeps a MoE model's routed experts in system RAM on request (``--n-cpu-moe``)."""
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
    start_cost: str | None
    """What its start costs that a person should be told before waiting (None: nothing)."""

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

    def verdict(
        self,
        model: GgufModel | HomelabError,
        label: str,
        report: GpuReport,
        options: PlanOptions,
        *,
        default_workload: Workload | None = None,
        engine_version: EngineVersion = None,
        ram: Callable[[], CpuMemory | None] | None = None,
    ) -> Fit:
        """A GGUF model's verdict on ``report``'s card (fits, how, or why not), planned as this
        kind would serve it; never raises for the model's own trouble. Only a kind that
        :attr:`loads_gguf` judges headers (:func:`gguf_kind`)."""
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

    def status_client(self, url: str, timeout_s: float, api_key: str | None = None) -> Any:
        """A live-status client for the engine at ``url`` (a context manager), or None;
        ``api_key``: the engine's own key (the record's), sent with every request."""
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

    def backend(self, executable: str) -> str | None:
        """What ``executable`` computes on, in one line (``CUDA (CUDA0: …)``, ``CPU only``),
        from the binary's own listing; None when it cannot say."""
        ...


KINDS: dict[str, EngineKind] = {kind.name: kind for kind in (LlamaCpp(), Vllm())}
"""Every engine kind, by its one name."""
DEFAULT_ENGINE = LlamaCpp.name
"""The engine homelab plans for and runs unless told."""


def gguf_kind() -> EngineKind:
    """The kind that serves GGUF files: the one that judges a header's verdict (the models
    menu, presets, a repo's quants, a model set)."""
    return next(kind for kind in KINDS.values() if kind.loads_gguf)


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
