"""What a person asks of a plan, as one typed value the CLI and the TUI both build.

:class:`PlanOptions` is the single description of "plan this model on this card this
way": the workload, the context and slots (or "let the plan decide"), cache types,
micro-batch, a unified KV pool, which card (or a synthetic size, or a recorded
snapshot) and which engine. Front-ends build it from their widgets or flags; the
domain turns it into a :class:`~homelab.plan.planner.PlanRequest` for the planner and
a card report (:func:`homelab.plan.card.card_for`). Values are checked here, once,
and a bad one is a :class:`~homelab.errors.UsageError` naming the *setting*, never a
front-end's flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from homelab.errors import UsageError
from homelab.plan.planner import PlanRequest
from homelab.plan.workload import AGENT, Workload

ENGINES = ("llama.cpp", "vllm")
"""Engine names, the same everywhere (presets, records, options)."""
DEFAULT_CACHE_TYPE = {"llama.cpp": "q8_0", "vllm": "auto"}
MIN_ENGINE_MEMORY = 64 << 20
"""The smallest engine memory limit worth trying (llama-server maps more than this empty)."""
MAX_VRAM = 1 << 50
"""1 PiB: a card size beyond this is a typo, not a card."""


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """One plan's settings; ``None`` means "let the plan (or the preset) decide"."""

    workload: Workload | None = None
    """Tokens one conversation must hold; None: the preset's hint, else an agent."""
    ctx: int | None = None
    """Total context (llama-server ``-c``, vLLM ``--max-model-len``)."""
    slots: int | None = None
    """Conversations served at once (``-np`` / ``--max-num-seqs``)."""
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    ubatch: int = 512
    unified: bool = False
    flash_attn: bool = True
    """Flash attention (``-fa``); off only where asked (a test that needs llama.cpp's lazy
    CPU work buffer, which flash attention does not use)."""
    gpu: int | tuple[int, ...] | None = None
    """Plan on this card, or these cards (NVML indices); None: the one with most free
    memory, or every card when the model needs more than one."""
    vram: int | None = None
    """Plan for a synthetic card of this many bytes with nothing else on it."""
    gpu_snapshot: Path | None = None
    """Plan against a recorded GPU snapshot instead of the live card."""
    sample_seconds: float = 2.0
    engine: str = "llama.cpp"
    port: int | None = None
    """Where the engine listens; None: its default, or the next free port."""
    engine_memory_limit: int | None = None
    """Cap on the engine process's memory (address space) in bytes, so it cannot swap the
    desktop; an allocation past it fails in the engine (and ``serve`` heals). None: no cap."""
    cache_ram: int | None = None
    """llama-server's host-RAM prompt cache (``--cache-ram``) in bytes, as the person set it;
    0: off. None: sized under ``engine_memory_limit`` when one is set, else the engine's
    default."""
    prove: bool | None = None
    """After ready, fill the largest slot once and watch memory; None: on for a GPU plan,
    off for a CPU plan."""
    kv_cache_memory: int | None = None
    """vLLM's KV pool in bytes (``--kv-cache-memory-bytes``); None: the plan decides."""
    force: bool = False
    """Start even where the plan says the engine would refuse (to see its own refusal)."""
    rpc: tuple[str, ...] = ()
    """llama.cpp RPC workers (``host:port``, ``homelab worker`` on other machines) to plan over."""

    def __post_init__(self) -> None:
        for name in ("ctx", "slots", "ubatch"):
            value = getattr(self, name)
            if value is not None and (not _whole(value) or value < 1):
                raise UsageError(
                    f"The {name} setting must be a whole number of at least 1, not {value}."
                )
        if isinstance(self.gpu, tuple | list):
            if not self.gpu or len(set(self.gpu)) != len(self.gpu):
                raise UsageError(
                    f"The GPU setting lists each card once (e.g. 0,1), not {list(self.gpu)}."
                )
            object.__setattr__(self, "gpu", tuple(self.gpu))
        for index in self.gpus or ():
            if not _whole(index) or index < 0:
                raise UsageError(f"The GPU setting is a card index (0, 1, ...), not {index}.")
        if self.vram is not None and (not _whole(self.vram) or self.vram <= 0):
            raise UsageError("The VRAM setting must be a positive size, e.g. 16 GiB.")
        if self.vram is not None and self.vram > MAX_VRAM:
            raise UsageError(
                f"The VRAM setting is at most 1 PiB ({MAX_VRAM:,} bytes), not {self.vram:.3g}."
            )
        if not self.sample_seconds >= 0:
            raise UsageError(
                f"The sampling window must be zero or more seconds, not {self.sample_seconds}."
            )
        if self.engine not in ENGINES:
            raise UsageError(
                f"Unknown engine {self.engine!r}: homelab runs {' or '.join(ENGINES)}."
            )
        limit = self.engine_memory_limit
        if limit is not None and (not _whole(limit) or limit < MIN_ENGINE_MEMORY):
            raise UsageError(
                f"The engine memory limit must be at least {MIN_ENGINE_MEMORY >> 20} MiB, "
                f"not {limit!r} bytes."
            )
        if self.cache_ram is not None and (not _whole(self.cache_ram) or self.cache_ram < 0):
            raise UsageError(
                f"The prompt cache size must be zero (off) or more bytes, not {self.cache_ram!r}."
            )
        if self.kv_cache_memory is not None and (
            not _whole(self.kv_cache_memory) or self.kv_cache_memory < 1
        ):
            raise UsageError(
                f"The KV cache memory must be a positive size, not {self.kv_cache_memory}."
            )
        if self.port is not None and (not _whole(self.port) or not 1 <= self.port <= 65535):
            raise UsageError(f"The port must be between 1 and 65535, not {self.port}.")
        if self.rpc:
            from homelab.plan.rpc_endpoints import check_rpc_setting

            object.__setattr__(self, "rpc", check_rpc_setting(self.rpc, self.engine))

    @property
    def gpus(self) -> tuple[int, ...] | None:
        """The cards asked for, as a tuple (one card: a tuple of one); None: not asked."""
        if self.gpu is None:
            return None
        return self.gpu if isinstance(self.gpu, tuple) else (self.gpu,)

    @property
    def type_k(self) -> str:
        return (self.cache_type_k or DEFAULT_CACHE_TYPE[self.engine]).lower()

    @property
    def type_v(self) -> str:
        return (self.cache_type_v or DEFAULT_CACHE_TYPE[self.engine]).lower()

    def request(self, default_workload: Workload | None = None) -> PlanRequest:
        """The planner's request; ``default_workload`` (a preset's hint) when none was set."""
        return PlanRequest(
            workload=self.workload or default_workload or AGENT,
            ctx=self.ctx,
            parallel=self.slots,
            type_k=self.type_k,
            type_v=self.type_v,
            ubatch=self.ubatch,
            unified=self.unified,
            flash_attn=self.flash_attn,
            device_indices=self.gpus,
        )
