"""vLLM's start-up log read whole: what it measured and whether it serves (the tests
compare the plan with it; homelab itself reads only the failure and the KV pool,
:mod:`homelab.engine.vllm.log`).

Formats are vLLM 0.33.0's, each line usually prefixed ``(EngineCore_DP0 pid=N) INFO
MM-DD HH:MM:SS [file.py:line]``, so patterns are searched, not anchored.

Ready = ``GET /health`` answers 200 **and** the log says ``Application startup
complete.`` with no failure: vLLM binds its port before the engine loads, and a
process on its way down can still answer for a moment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from homelab.engine.vllm.log import VllmFailure, find_failure

_NUM = r"([\d,]+)"
_GIB = r"(-?[\d.]+)"


def _int(text: str) -> int:
    return int(text.replace(",", ""))


_ENGINE_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)")
_SERVER_VERSION = re.compile(r"vLLM server version (\S+), serving model (\S+)")
_BANNER_VERSION = re.compile(r"█\s+version (\S+)")
_BANNER_MODEL = re.compile(r"█\s+model\s+(\S+)")
_PREFIX_CACHING = re.compile(r"enable_prefix_caching=(True|False)")
_ARCH = re.compile(r"Resolved architecture: (\S+)")
_MAX_LEN = re.compile(r"Using max model len (\d+)")
_BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
_WEIGHTS = re.compile(r"Model loading took ([\d.]+) GiB memory")
_GRAPH_EST = re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB total")
_AVAILABLE = re.compile(r"Available KV cache memory: " + _GIB + r" GiB")
_CONCURRENCY = re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: ([\d.]+)x")
_GRAPH_TOOK = re.compile(r"Graph capturing finished in \d+ secs, took ([\d.]+) GiB")
_INIT_TOOK = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+)")
_URL = re.compile(r"Starting vLLM (?:API )?server (?:\d+ )?on (https?://\S+)")
_COMPLETE = re.compile(r"Application startup complete")
_KV_TOKENS = re.compile(r"(\w[\w +]*?) KV cache size: " + _NUM + r" tokens")


@dataclass(frozen=True, slots=True)
class VllmStartup:
    """What a start-up log said (``None``: the line has not appeared)."""

    version: str | None = None
    model: str | None = None
    architecture: str | None = None
    max_model_len: int | None = None
    attention_block_size: int | None = None
    weights_gib: float | None = None
    cuda_graph_estimate_gib: float | None = None
    available_kv_gib: float | None = None
    kv_cache_tokens: int | None = None
    kv_cache_device: str | None = None
    """Where the pool is, as the capacity line names it: ``GPU``, ``CPU``."""
    prefix_caching: bool | None = None
    """``enable_prefix_caching`` in the engine's config line."""
    concurrency_tokens: int | None = None
    max_concurrency: float | None = None
    cuda_graph_gib: float | None = None
    init_seconds: float | None = None
    url: str | None = None
    startup_complete: bool = False
    failure: VllmFailure | None = None

    @property
    def serving(self) -> bool:
        """The log's half of readiness: startup complete and nothing failed."""
        return self.startup_complete and self.failure is None


def parse_vllm_log(text: str) -> VllmStartup:
    """Everything :class:`VllmStartup` holds, from the log text so far."""
    found: dict[str, object] = {}
    for line in text.splitlines():
        for key, pattern, convert in _LINE_FIELDS:
            match = pattern.search(line)
            if match and key not in found:
                found[key] = convert(match)
        match = _SERVER_VERSION.search(line)
        if match:
            found.setdefault("version", match.group(1))
            found.setdefault("model", match.group(2))
        match = _KV_TOKENS.search(line)
        if match and "kv_cache_tokens" not in found:
            found["kv_cache_tokens"] = _int(match.group(2))
            found["kv_cache_device"] = match.group(1).split()[-1]
        match = _CONCURRENCY.search(line)
        if match and "max_concurrency" not in found:
            found["concurrency_tokens"] = _int(match.group(1))
            found["max_concurrency"] = float(match.group(2))
        if _COMPLETE.search(line):
            found["startup_complete"] = True
    return VllmStartup(**found, failure=find_failure(text))  # type: ignore[arg-type]


_LINE_FIELDS = (
    ("version", _ENGINE_VERSION, lambda m: m.group(1)),
    ("version", _BANNER_VERSION, lambda m: m.group(1)),
    ("model", _BANNER_MODEL, lambda m: m.group(1)),
    ("prefix_caching", _PREFIX_CACHING, lambda m: m.group(1) == "True"),
    ("architecture", _ARCH, lambda m: m.group(1)),
    ("max_model_len", _MAX_LEN, lambda m: int(m.group(1))),
    ("attention_block_size", _BLOCK, lambda m: int(m.group(1))),
    ("weights_gib", _WEIGHTS, lambda m: float(m.group(1))),
    ("cuda_graph_estimate_gib", _GRAPH_EST, lambda m: float(m.group(1))),
    ("available_kv_gib", _AVAILABLE, lambda m: float(m.group(1))),
    ("cuda_graph_gib", _GRAPH_TOOK, lambda m: float(m.group(1))),
    ("init_seconds", _INIT_TOOK, lambda m: float(m.group(1))),
    ("url", _URL, lambda m: m.group(1).rstrip(".,")),
)


def is_ready(health_ok: bool, log: VllmStartup | str) -> bool:
    """Readiness: ``/health`` answered 200 and the log says it is serving, with no failure."""
    startup = parse_vllm_log(log) if isinstance(log, str) else log
    return health_ok and startup.serving
