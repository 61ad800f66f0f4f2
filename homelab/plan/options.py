"""What a person asks of a plan, as one typed value nested by concern.

:class:`PlanOptions` is the single description of "plan this model on this card this
way", in four parts: the card (:class:`CardOptions`: which card, a synthetic size or a
recorded snapshot, RPC workers), the engine (:class:`EngineOptions`: its name, port,
memory cap, prompt cache, flash attention, vLLM's KV pool), the workload
(:class:`WorkloadOptions`: tokens per conversation, context, slots, cache types,
micro-batch, a unified pool) and serving (:class:`ServeOptions`: the memory proof, a
forced start). Each part checks its own values when built, and a bad one is a
:class:`~homelab.errors.UsageError` naming the *setting*, never a front-end's flag.

The engine is an opaque name here: what depends on it (its default cache type, whether it
takes RPC workers, that the name exists) is the engine kind's, and the one builder the
front-ends call (:func:`homelab.engine.options.plan_options`) asks the kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from homelab.errors import UsageError
from homelab.plan.planner import PlanRequest
from homelab.plan.workload import AGENT, Workload

MIN_ENGINE_MEMORY = 64 << 20
"""The smallest engine memory limit worth trying (llama-server maps more than this empty)."""
MAX_VRAM = 1 << 50
"""1 PiB: a card size beyond this is a typo, not a card."""


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class CardOptions:
    """Which memory the plan is for: a live card (or cards), a synthetic one, a snapshot."""

    gpu: int | tuple[int, ...] | None = None
    """Plan on this card, or these cards (NVML indices); None: the one with most free
    memory, or every card when the model needs more than one."""
    vram: int | None = None
    """Plan for a synthetic card of this many bytes with nothing else on it."""
    gpu_snapshot: Path | None = None
    """Plan against a recorded GPU snapshot instead of the live card."""
    sample_seconds: float = 2.0
    rpc: tuple[str, ...] = ()
    """llama.cpp RPC workers (``host:port``, ``homelab worker`` on other machines) to plan over."""
    cpu: bool = False
    """Plan for system RAM even where a card is (``--cpu``): the only way to run on the CPU on
    a machine with an NVIDIA driver, and then the plan is a CPU plan, not a card's."""
    n_cpu_moe: int | None = None
    """Keep the routed experts of the first N blocks in system RAM, attention and KV on the
    card (llama.cpp's ``--n-cpu-moe``; ``EVERY_BLOCK``: all of them); None or 0: none."""

    def __post_init__(self) -> None:
        if self.n_cpu_moe is not None and (not _whole(self.n_cpu_moe) or self.n_cpu_moe < 0):
            raise UsageError(
                f"The experts-in-RAM setting is a number of blocks, 0 or more, not {self.n_cpu_moe!r}."
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
        if self.cpu and (self.vram is not None or self.gpu is not None or self.gpu_snapshot):
            raise UsageError(
                "The CPU setting plans for system RAM; it takes no card (VRAM size, GPU index "
                "or GPU snapshot) beside it."
            )
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
        if self.rpc:
            from homelab.plan.rpc_endpoints import parse_endpoints

            object.__setattr__(self, "rpc", parse_endpoints(tuple(self.rpc)))

    @property
    def gpus(self) -> tuple[int, ...] | None:
        """The cards asked for, as a tuple (one card: a tuple of one); None: not asked."""
        if self.gpu is None:
            return None
        return self.gpu if isinstance(self.gpu, tuple) else (self.gpu,)


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """Which engine runs the plan, and the engine-wide settings it starts with."""

    name: str
    """The engine kind's name (opaque here; :mod:`homelab.engine.kinds` knows them)."""
    cache_type: str
    """The engine's own KV cache type where the workload sets none (its kind's default)."""
    port: int | None = None
    """Where the engine listens; None: its default, or the next free port."""
    memory_limit: int | None = None
    """Cap on the engine process's memory (address space) in bytes, so it cannot swap the
    desktop; an allocation past it fails in the engine (and ``serve`` heals). None: no cap."""
    cache_ram: int | None = None
    """llama-server's host-RAM prompt cache (``--cache-ram``) in bytes, as the person set it;
    0: off. None: sized under ``memory_limit`` when one is set, else the engine's default."""
    flash_attn: bool | None = None
    """Flash attention (``-fa``), as asked (a test that needs llama.cpp's lazy CPU work
    buffer, which flash attention does not use, turns it off); None: on, unless a plan for
    system RAM finds another setting faster (:mod:`homelab.plan.cpu_kv`)."""
    kv_cache_memory: int | None = None
    """vLLM's KV pool in bytes (``--kv-cache-memory-bytes``); None: the plan decides."""

    def __post_init__(self) -> None:
        limit = self.memory_limit
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


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """What the plan must hold; ``None`` means "let the plan (or the preset) decide"."""

    per_slot: Workload | None = None
    """Tokens one conversation must hold; None: the preset's hint, else an agent."""
    ctx: int | None = None
    """Total context (llama-server ``-c``, vLLM ``--max-model-len``)."""
    slots: int | None = None
    """Conversations served at once (``-np`` / ``--max-num-seqs``)."""
    cache_type_k: str | None = None
    """The K cache type asked; None: the engine's (:attr:`EngineOptions.cache_type`)."""
    cache_type_v: str | None = None
    ubatch: int = 512
    unified: bool = False

    def __post_init__(self) -> None:
        for name in ("ctx", "slots", "ubatch"):
            value = getattr(self, name)
            if value is not None and (not _whole(value) or value < 1):
                raise UsageError(
                    f"The {name} setting must be a whole number of at least 1, not {value}."
                )


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How ``serve`` treats the plan once it is made."""

    prove: bool | None = None
    """After ready, fill the largest slot once and watch memory; None: on for a GPU plan,
    off for a CPU plan."""
    force: bool = False
    """Start even where the plan says the engine would refuse (to see its own refusal)."""


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """One plan's settings, by concern."""

    engine: EngineOptions
    card: CardOptions = field(default_factory=CardOptions)
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    serve: ServeOptions = field(default_factory=ServeOptions)

    @property
    def type_k(self) -> str:
        """The K cache type the plan uses: the one asked, else the engine's."""
        return (self.workload.cache_type_k or self.engine.cache_type).lower()

    @property
    def type_v(self) -> str:
        """The V cache type the plan uses: the one asked, else the engine's."""
        return (self.workload.cache_type_v or self.engine.cache_type).lower()

    def pinned(self, *, ctx: int | None, slots: int | None) -> PlanOptions:
        """These options with the context and slots set (a heal's smaller shape, a re-plan
        that keeps the running one's)."""
        return replace(self, workload=replace(self.workload, ctx=ctx, slots=slots))

    def request(self, default_workload: Workload | None = None) -> PlanRequest:
        """The planner's request; ``default_workload`` (a preset's hint) when none was set."""
        w = self.workload
        asked = (w.cache_type_k, w.cache_type_v, self.engine.flash_attn)
        return PlanRequest(
            workload=w.per_slot or default_workload or AGENT,
            ctx=w.ctx,
            parallel=w.slots,
            type_k=self.type_k,
            type_v=self.type_v,
            kv_asked=any(value is not None for value in asked),
            ubatch=w.ubatch,
            unified=w.unified,
            flash_attn=self.engine.flash_attn is not False,
            device_indices=self.card.gpus,
            n_cpu_moe=self.card.n_cpu_moe,
        )
