"""The launch proof: fill the largest slot once, at full micro-batch, and watch memory and the log.

llama.cpp allocates part of its memory lazily, on the first big batch (compute scratch;
on CUDA the flash-attention F16 copy of a quantized K/V), so a plan can look fine at
"ready" and run out of memory on the first long agent turn. After ready and before the
session announces it, :func:`prove` sends one completion whose prompt fills the largest
slot's context (to ``n_ctx_slot`` less a few tokens; the prompt is token ids from the
engine's own ``/tokenize``, so its length is exact), ``n_predict`` small, pinned to that
slot, no prompt cache. Meanwhile it samples the engine's memory (the card's used memory
through :class:`~homelab.gpu.telemetry.TelemetryPoller` on a GPU plan; the process's
resident memory through psutil on a CPU plan) and reads the engine's log lines as the
supervisor delivers them, for an out-of-memory line.

Pure llama-server HTTP (``/slots``, ``/tokenize``, ``/completion``): no front-end, no print.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import httpx

from homelab.engine.engine_key import key_headers
from homelab.engine.loopback import loopback_client
from homelab.paths import state_dir

if TYPE_CHECKING:
    from homelab.engine.supervision.supervisor import Supervisor

MARGIN_TOKENS = 8
"""The prompt stops this many tokens short of the slot's context (room for the reply)."""
N_PREDICT = 2
LOG_WAIT_S = 2.0
"""How long a proof whose request failed for memory waits for the engine's own log line."""
SAMPLE_S = 0.1
SEED_TEXT = (
    "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly "
    "figures, the river keeps rising past the old mill, and somebody asks for more coffee. "
)


@dataclass(frozen=True, slots=True)
class ProofResult:
    """What the launch proof saw."""

    slot: int
    ctx_per_slot: int
    prompt_tokens: int
    """Tokens the prompt had (the engine's own count when it answered)."""
    seconds: float
    memory_source: str
    """ "card" (the GPU's used memory, NVML) or "process" (the engine's resident memory)."""
    before_bytes: int | None
    peak_bytes: int | None
    predicted_bytes: int | None
    """What the plan expects the engine to hold on that memory (weights, engine state, KV)."""
    oom: str | None = None
    """The engine's out-of-memory line, when it printed one (or its failure said so)."""
    error: str | None = None
    """Why the request did not complete (the engine died, an HTTP error)."""

    @property
    def ok(self) -> bool:
        return self.oom is None and self.error is None

    def as_dict(self) -> dict[str, object]:
        """Every field, ``ok`` first, the seconds to the ms (the launch file's ``proof``)."""
        return {"ok": self.ok, **asdict(self), "seconds": round(self.seconds, 3)}


class MemoryWatch:
    """Samples one memory figure on a thread of its own until stopped; keeps the peak."""

    def __init__(self, pid: int | None, gpu: str | None) -> None:
        self.source = "card" if gpu is not None else "process"
        self._pid, self._gpu = pid, gpu
        self._stop = threading.Event()
        self._poller: Any = None
        self.before: int | None = None
        self.peak: int | None = None
        self._thread = threading.Thread(target=self._run, name="homelab-proof-memory", daemon=True)

    def _read(self) -> int | None:
        if self._poller is not None:
            sample = self._poller.latest
            if sample is None:
                return None
            devices = [d for d in sample.report.devices if d.name == self._gpu]
            devices = devices or list(sample.report.devices)  # one card: it
            return None if not devices else devices[0].total - devices[0].free
        if self._pid is None:
            return None
        import psutil

        try:
            return int(psutil.Process(self._pid).memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def start(self) -> None:
        if self._gpu is not None:
            from homelab.errors import HomelabError
            from homelab.gpu.telemetry import TelemetryPoller

            poller = TelemetryPoller(interval_s=SAMPLE_S, own_pids=frozenset({self._pid or 0}))
            try:
                poller.start()
                self._poller = poller
            except HomelabError:  # the card cannot be read now: watch the process instead
                self._gpu, self.source = None, "process"
        self.before = self._read()
        self.peak = self.before
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._take()

    def _take(self) -> None:
        value = self._read()
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._take()
        if self._poller is not None:
            self._poller.stop()


class LogWatch:
    """Collects the engine's out-of-memory lines from the supervisor's live log."""

    def __init__(self, supervisor: Supervisor, heal_line: Callable[[str], bool]) -> None:
        self.heal_line = heal_line
        self.lines: list[str] = []
        self._said = threading.Condition()
        self._unsubscribe = supervisor.subscribe(self._line, log_lines=True)

    def _line(self, item: object) -> None:
        text = getattr(item, "text", None)
        if isinstance(text, str) and self.heal_line(text):
            with self._said:
                self.lines.append(text)
                self._said.notify_all()

    def wait(self, timeout_s: float) -> str | None:
        """The first out-of-memory line, waiting up to ``timeout_s`` for one (the engine
        answers a failed batch before its follower reads the line); None."""
        with self._said:
            self._said.wait_for(lambda: bool(self.lines), timeout_s)
            return self.lines[0] if self.lines else None

    def close(self) -> None:
        self._unsubscribe()


def _error_message(response: httpx.Response) -> str:
    """The engine's error message of a failed request (its JSON ``error.message``), or its text."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def proof_prompt(client: httpx.Client, n_tokens: int) -> list[int]:
    """``n_tokens`` token ids of ordinary text, from the engine's own tokenizer."""
    response = client.post("/tokenize", json={"content": SEED_TEXT})
    response.raise_for_status()
    seed = [int(t) for t in response.json()["tokens"]]
    if not seed:
        raise ValueError("the engine's tokenizer returned no tokens")
    return (seed * (n_tokens // len(seed) + 1))[:n_tokens]


def largest_slot(client: httpx.Client) -> tuple[int, int]:
    """(slot id, its context) of the slot with the most context (``/slots``)."""
    response = client.get("/slots")
    response.raise_for_status()
    slots = [(int(s["id"]), int(s["n_ctx"])) for s in response.json()]
    return max(slots, key=lambda s: (s[1], -s[0]))


def prove(
    url: str,
    supervisor: Supervisor,
    *,
    pid: int | None,
    gpu: str | None,
    predicted_bytes: int | None,
    timeout_s: float,
    heal_line: Callable[[str], bool],
    on_start: Callable[[int, int, int], None] | None = None,
    api_key: str | None = None,
) -> ProofResult:
    """Fill the largest slot of the engine at ``url`` once; see the module docstring.

    ``gpu``: the card's name on a GPU plan (its used memory is watched), None on a CPU plan
    (the engine process's resident memory). ``supervisor`` gives the live log, whose lines
    ``heal_line`` says are an out-of-memory (the engine kind's reading); ``on_start(slot, prompt_tokens, ctx)`` is called
    once the prompt is built; ``api_key``: the engine's own key, sent with every request (an
    engine behind homelab's gate answers 401 without it). Never raises for the engine's sake: a failure is in the result.
    """
    memory = MemoryWatch(pid, gpu)
    log = LogWatch(supervisor, heal_line)
    slot, n_ctx, tokens, seconds = 0, 0, 0, 0.0
    error: str | None = None
    body_oom: str | None = None
    try:
        with loopback_client(url, timeout_s=timeout_s, headers=key_headers(api_key)) as client:
            slot, n_ctx = largest_slot(client)
            prompt = proof_prompt(client, max(1, n_ctx - MARGIN_TOKENS - N_PREDICT))
            tokens = len(prompt)
            if on_start is not None:
                on_start(slot, tokens, n_ctx)
            memory.start()
            began = time.monotonic()
            body = {
                "prompt": prompt,
                "n_predict": N_PREDICT,
                "id_slot": slot,
                "cache_prompt": False,
                "temperature": 0.0,
            }
            response = client.post("/completion", json=body)
            seconds = time.monotonic() - began
            if response.status_code != 200:
                error = f"HTTP {response.status_code}: {response.text[:200]}"
                if heal_line(response.text):  # b11312: 500 "decode() failed: std::bad_alloc"
                    body_oom = _error_message(response)
            else:
                timings = response.json().get("timings") or {}
                tokens = int(timings.get("prompt_n") or tokens)
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as problem:
        error = f"{type(problem).__name__}: {problem}"
    finally:
        memory.stop()
    oom = log.wait(LOG_WAIT_S if body_oom is not None else 0.0) or body_oom
    log.close()
    return ProofResult(
        slot=slot,
        ctx_per_slot=n_ctx,
        prompt_tokens=tokens,
        seconds=seconds,
        memory_source=memory.source,
        before_bytes=memory.before,
        peak_bytes=memory.peak,
        predicted_bytes=predicted_bytes,
        oom=oom,
        error=error,
    )


LAUNCH_FILE = "launch.json"
"""``state_dir()/launch.json``: what the last launch's proof and heal saw, by engine pid."""


def save_launch(pid: int | None, **facts: object) -> None:
    """Merge ``facts`` (``proof=``, ``healed=``: JSON-able) into the launch file of ``pid``;
    a file of another pid is replaced. Best effort: a state folder that cannot be written
    costs the report, never the serve."""
    path = state_dir() / LAUNCH_FILE
    data = launch_of(pid) or {}
    data.update({"pid": pid, **facts})
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{LAUNCH_FILE}.{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1) + "\n", "utf-8")
        os.replace(tmp, path)


def launch_of(pid: int | None) -> dict[str, object] | None:
    """The launch file's facts when they are ``pid``'s (the engine ``status`` shows); None."""
    try:
        data = json.loads((state_dir() / LAUNCH_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or pid is None or data.get("pid") != pid:
        return None
    return data
