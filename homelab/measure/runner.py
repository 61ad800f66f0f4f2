"""Run a bench: the concurrency levels one after another, bounded in time, cancellable.

:func:`run_bench` runs on the calling thread (its own asyncio loop) and returns a
:class:`~homelab.measure.report.BenchReport`. A front-end calls it from a worker thread
and sets ``cancel`` (a ``threading.Event``) to stop it: the requests in flight are
dropped (their connections closed, so the engine stops working on them) and the report
holds what completed, with ``stopped="cancelled"``. The time limit does the same with
``stopped="time limit"``. When the engine dies or refuses a request mid-run, the error
(an ``EngineError``) is raised with the partial report on its ``partial`` attribute.

Each level first prepares its prompts (cut to size by the engine's tokenizer, not timed),
then runs ``c`` clients at once, each sending ``turns`` requests one after another (an
agent session's turns, or independent prompts); while it runs, ``/metrics`` is sampled
for the requests the engine defers. With a gate, the same level then runs through the
gate (fresh prompts, the same shape), so both figures show side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from dataclasses import dataclass, field

import httpx

from homelab.engine.llamacpp.answers import parse_props
from homelab.engine.llamacpp.metrics import LlamaMetrics, MetricsFormatError
from homelab.measure import shapes
from homelab.measure.levels import LevelResult, summarize
from homelab.measure.progress import (
    BenchFinished,
    BenchStarted,
    LevelDone,
    LevelStarted,
    Listener,
    RequestDone,
)
from homelab.measure.report import BenchReport
from homelab.measure.settings import BenchSettings
from homelab.measure.shapes import AgentSession, Workload
from homelab.measure.stream import (
    EngineLostError,
    RequestRefusedError,
    Sample,
    fit_tokens,
    open_client,
    stream_completion,
)
from homelab.measure.target import NoEngineError
from homelab.measure.verdict import recommend

POLL_S = 0.05
"""How often a level looks at its clock and the cancel flag."""


@dataclass
class _Run:
    settings: BenchSettings
    emit: Listener
    cancel: threading.Event
    deadline: float
    engine: httpx.AsyncClient
    system: str = ""
    seed: int = field(default_factory=lambda: random.SystemRandom().randrange(1 << 30))
    """This run's own text: a prompt left in the engine's cache by an earlier bench is
    never this run's."""
    prompts_made: int = field(default_factory=lambda: random.SystemRandom().randrange(1 << 16))
    """Prompts (chat) or sessions (agent) made so far; starts anywhere, so that first words
    differ from an earlier run's too."""
    levels: list[LevelResult] = field(default_factory=list)
    gate_levels: list[LevelResult] = field(default_factory=list)

    def stop_reason(self) -> str | None:
        if self.cancel.is_set():
            return "cancelled"
        if time.monotonic() >= self.deadline:
            return "time limit"
        return None


def run_bench(
    settings: BenchSettings,
    *,
    on_event: Listener | None = None,
    cancel: threading.Event | None = None,
) -> BenchReport:
    """Measure the engine at ``settings.engine_url`` (and the gate, when given).

    Raises:
        UsageError: the settings cannot be (see :meth:`BenchSettings.check`), or the
            longest request would not fit one slot.
        NoEngineError: nothing answers at the URL (or not llama-server).
        EngineLostError, RequestRefusedError: mid-run; ``error.partial`` is the report of
            what completed.
    """
    settings.check()
    return asyncio.run(_bench(settings, on_event or (lambda _e: None), cancel or threading.Event()))


async def _props(engine: httpx.AsyncClient) -> dict:
    try:
        response = await engine.get("/props")
    except httpx.TransportError as error:
        raise NoEngineError(
            f"nothing answers at {engine.base_url} ({type(error).__name__})",
            hint="Start one (`serve`), or point the bench at a running llama-server (`url`).",
        ) from None
    try:
        data = response.json() if response.status_code == 200 else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise NoEngineError(
            f"{engine.base_url}/props answered HTTP {response.status_code}, not llama-server's "
            "properties (still loading, or not llama-server)",
            hint="Wait until `status` says ready; the bench measures llama.cpp engines.",
        )
    return data


async def _bench(settings: BenchSettings, emit: Listener, cancel: threading.Event) -> BenchReport:
    started_wall, started = time.time(), time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        engine = await stack.enter_async_context(
            open_client(settings.engine_url, api_key=settings.engine_key)
        )
        gate = None
        if settings.gate_url is not None:
            gate = await stack.enter_async_context(
                open_client(settings.gate_url, api_key=settings.api_key)
            )
        props = parse_props(await _props(engine))
        settings = settings.for_engine(props.total_slots, props.n_ctx_per_slot)
        assert settings.prompt_tokens is not None and settings.concurrency is not None
        run = _Run(settings, emit, cancel, started + settings.time_limit_s, engine)
        emit(
            BenchStarted(
                settings.engine_url, settings.gate_url, settings.concurrency, settings.time_limit_s
            )
        )
        stopped: str | None = None
        try:
            if settings.warmup:
                await stream_completion(engine, "Warm up: say something.", 2)
            if settings.workload is Workload.AGENT:
                run.system = await fit_tokens(
                    engine,
                    shapes.system_prompt(settings.prompt_tokens, seed=run.seed),
                    settings.prompt_tokens,
                )
            for concurrency in settings.concurrency:
                for via, http, into in (
                    ("engine", engine, run.levels),
                    ("gate", gate, run.gate_levels),
                ):
                    if http is None:
                        continue
                    stopped = stopped or run.stop_reason()
                    if stopped:
                        break
                    result = await _level(run, http, concurrency, via, into)
                    if not result.complete:
                        stopped = run.stop_reason() or "stopped"
                if stopped:
                    break
        except (EngineLostError, RequestRefusedError) as error:
            error.partial = _report(run, props, error.title, started_wall, started)
            raise
        report = _report(run, props, stopped, started_wall, started)
    emit(BenchFinished(report))
    return report


def _report(
    run: _Run, props, stopped: str | None, started_wall: float, started: float
) -> BenchReport:
    s = run.settings
    assert s.prompt_tokens is not None and s.concurrency is not None
    return BenchReport(
        engine_url=s.engine_url,
        gate_url=s.gate_url,
        workload=s.workload.value,
        prompt_tokens=s.prompt_tokens,
        max_tokens=s.max_tokens,
        turns=s.turns,
        concurrency=s.concurrency,
        levels=tuple(run.levels),
        gate_levels=tuple(run.gate_levels),
        recommendation=recommend(run.levels, memory_slots=props.total_slots),
        stopped=stopped,
        engine_version=props.build_info,
        model_path=props.model_path,
        slots=props.total_slots,
        ctx_per_slot=props.n_ctx_per_slot,
        started_at=started_wall,
        elapsed_s=time.monotonic() - started,
    )


async def _prompts(run: _Run, concurrency: int, salt: int) -> list[list[str]]:
    """Each client's prompts (chat) or turn parts (agent), cut to size by the engine."""
    s = run.settings
    assert s.prompt_tokens is not None
    out: list[list[str]] = []
    for _client in range(concurrency):
        session = run.prompts_made
        texts = []
        for turn in range(s.turns):
            if s.workload is Workload.CHAT:  # every prompt its own first word: no shared prefix
                text = shapes.independent_prompt(run.prompts_made, s.prompt_tokens, salt=salt)
                run.prompts_made += 1
                n = s.prompt_tokens
            else:
                n = shapes.agent_turn_tokens(s.prompt_tokens)
                text = shapes.turn_part(session, turn, n, salt=salt)
            texts.append(await fit_tokens(run.engine, text, n))
        if s.workload is Workload.AGENT:
            run.prompts_made += 1
        out.append(texts)
    return out


async def _deferred(run: _Run, seen: list[int], stop: asyncio.Event) -> None:
    """Sample the engine's deferred-requests gauge until ``stop``; leaves ``seen`` empty
    when the engine has no readable ``/metrics``."""
    while not stop.is_set():
        try:
            response = await run.engine.get("/metrics", timeout=5.0)
            if response.status_code != 200:
                return
            value = LlamaMetrics.from_text(response.text).requests_deferred
        except (httpx.HTTPError, MetricsFormatError):
            return
        if value is not None:
            seen.append(int(value))
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), run.settings.metrics_interval_s)


async def _level(
    run: _Run, http: httpx.AsyncClient, concurrency: int, via: str, into: list[LevelResult]
) -> LevelResult:
    """Run one level; its result (what completed, when an error or a stop cut it short)
    goes into ``into`` and out as a :class:`LevelDone` before any error leaves."""
    s = run.settings
    prompts = await _prompts(
        run, concurrency, salt=run.seed * 64 + len(run.levels) * 2 + (via == "gate")
    )
    planned = concurrency * s.turns
    run.emit(LevelStarted(concurrency, via, planned))
    samples: list[tuple[Sample, int]] = []

    async def client(index: int, texts: list[str]) -> None:
        session = AgentSession(run.system, index)
        for turn, text in enumerate(texts):
            prompt = text if s.workload is Workload.CHAT else session.prompt(text)
            sample = await stream_completion(http, prompt, s.max_tokens)
            session.answered(text, sample.text)
            samples.append((sample, turn))
            run.emit(RequestDone(concurrency, via, len(samples), planned, sample.ttft_s))

    seen: list[int] = []
    done_sampling = asyncio.Event()
    sampler = asyncio.create_task(_deferred(run, seen, done_sampling))
    began = time.perf_counter()
    tasks = [asyncio.create_task(client(i, texts)) for i, texts in enumerate(prompts)]
    complete = False
    try:
        pending = set(tasks)
        while pending:
            finished, pending = await asyncio.wait(pending, timeout=POLL_S)
            for task in finished:
                failure = task.exception()
                if failure is not None:
                    raise failure
            if pending and run.stop_reason():
                break
        complete = not pending
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        done_sampling.set()
        await asyncio.gather(sampler, return_exceptions=True)
        ended = max(
            (smp.started_at + smp.total_s for smp, _ in samples), default=time.perf_counter()
        )
        result = summarize(
            concurrency,
            [smp for smp, _ in samples],
            planned=planned,
            complete=complete,
            wall_s=ended - began,
            deferred=max(seen) if seen else None,
            turns=[t for _, t in samples] if s.workload is Workload.AGENT else (),
        )
        into.append(result)
        run.emit(LevelDone(result, via))
    return result
