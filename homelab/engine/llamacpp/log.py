"""Read llama-server's load log: memory lines, context parameters, readiness, failures.

Pure functions over log text (no I/O). The formats are llama.cpp's (pinned
commit 0c1e570), printed at verbosity 4 (``-lv 4``); each line may carry the
default ``S.MM.SSS.mmm L`` prefix or none, so every pattern is searched, not
anchored. Recognised:

- ``llama_kv_cache: size = X MiB (N cells, L layers, S/T seqs), K (type): A MiB, V (type): B MiB``
  (two of them for iSWA models, each preceded by ``llama_kv_cache_iswa: creating
  {non-SWA,SWA} KV cache, size = N cells``);
- ``llama_memory_recurrent: size = X MiB (N cells, L layers, S seqs R rs_seq), R (..), S (..)``
  (newer builds add ``, P (..)``);
- ``<func>: <device> {model,KV,RS,compute,output} buffer size = X MiB`` (an RPC worker's
  device reads ``RPC<i>[host:port]``: :func:`rpc_buffer_endpoint`);
- ``llama_context: <name> = <value>`` for n_ctx, n_ctx_seq, n_seq_max, n_batch,
  n_ubatch, flash_attn, kv_unified, causal_attn, n_rs_seq;
- ``listening on http://host:port``;
- failure lines (see :class:`FailureKind`).

MiB figures are kept exactly as logged; :func:`mib_byte_range` gives the byte
interval consistent with the 2-decimal rounding (and, for the KV/RS size lines,
llama.cpp's single-precision division).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum

MIB = 1024 * 1024
_F32_REL = 2.0**-23  # relative half-ulp-ish slack for values computed in float


def mib_byte_range(mib: float, *, single_precision: bool = False) -> tuple[int, int]:
    """Inclusive ``(lo, hi)`` byte counts that print as ``mib`` with llama.cpp's 2 decimals.

    ``single_precision`` widens the interval for values llama.cpp divides in
    ``float`` (the KV and RS "size =" lines), whose error grows with the size.
    """
    half_step = 0.005
    slack = abs(mib) * _F32_REL if single_precision else 0.0
    lo = math.ceil((mib - half_step - slack) * MIB)
    hi = math.floor((mib + half_step + slack) * MIB)
    return max(lo, 0), hi


@dataclass(frozen=True)
class KvCacheLine:
    """One ``llama_kv_cache: size = ...`` line.

    ``cells`` is per stream; ``n_stream`` is 1 with a unified cache, else
    ``n_seq_max``. ``swa`` is True/False for the SWA/non-SWA cache of an iSWA
    model (from the preceding ``llama_kv_cache_iswa`` line), None otherwise.
    """

    size_mib: float
    cells: int
    layers: int
    n_seq_max: int
    n_stream: int
    type_k: str
    k_mib: float
    type_v: str
    v_mib: float
    swa: bool | None = None


@dataclass(frozen=True)
class RecurrentLine:
    """One ``llama_memory_recurrent: size = ...`` line (cells = sequence slots).

    ``layers`` is the model's layer count as printed (llama.cpp prints all
    layers, not only the recurrent ones). ``p_mib`` is None on builds that do
    not print the P part.
    """

    size_mib: float
    cells: int
    layers: int
    n_seq_max: int
    n_rs_seq: int
    type_r: str
    r_mib: float
    type_s: str
    s_mib: float
    p_mib: float | None = None


@dataclass(frozen=True)
class BufferLine:
    """``<source>: <device> <kind> buffer size = X MiB`` (kind: model/KV/RS/compute/output)."""

    source: str
    device: str
    kind: str
    mib: float

    @property
    def worker(self) -> str | None:
        """The RPC worker (``host:port``) this buffer lives on; None for a local device."""
        return rpc_buffer_endpoint(self.device)


_RPC_BUFFER_DEVICE = re.compile(r"^RPC\d+\[([^\]]+)\]$")


def rpc_buffer_endpoint(device: str) -> str | None:
    """``host:port`` of a logged RPC buffer device (``RPC<index on the worker>[host:port]``,
    llama.cpp's buffer-type name); None for a local device (``CPU``, ``CUDA0``...)."""
    match = _RPC_BUFFER_DEVICE.match(device)
    return match.group(1) if match else None


@dataclass(frozen=True)
class IswaCacheLine:
    """``llama_kv_cache_iswa: creating {non-SWA,SWA} KV cache, size = N cells``."""

    swa: bool
    cells: int


@dataclass(frozen=True)
class ContextParams:
    """``llama_context:`` values; None when the line is absent (e.g. load failed first)."""

    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_seq_max: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str | None = None  # "enabled" / "disabled" / "auto"
    kv_unified: bool | None = None
    causal_attn: bool | None = None
    n_rs_seq: int | None = None


class FailureKind(Enum):
    """What a failure line says went wrong."""

    LOAD_FAILED = "load_failed"  # failed to load model / error loading model
    UNKNOWN_ARCHITECTURE = "unknown_architecture"
    BIND_FAILED = "bind_failed"  # couldn't bind HTTP server socket
    OUT_OF_MEMORY = "out_of_memory"  # out of memory / insufficient memory / failed to allocate
    QUANTIZED_V_NEEDS_FLASH_ATTN = "quantized_v_needs_flash_attn"
    KV_TYPES_MUST_MATCH = "kv_types_must_match"  # MLA models: -ctk must equal -ctv
    CONTEXT_FAILED = "context_failed"  # failed to create_context / initialize the context
    INVALID_ARGUMENT = "invalid_argument"
    ABORTED = "aborted"  # GGML_ASSERT / GGML_ABORT


@dataclass(frozen=True)
class Failure:
    """A recognised failure line.

    ``detail`` is the most useful value on the line when there is one: the
    unknown architecture's name, the busy port, the device that failed to
    allocate, the K cache type refused next to a different V type, the
    assertion text, or the invalid argument.
    """

    kind: FailureKind
    line: str
    detail: str | None = None


@dataclass(frozen=True)
class LoadLog:
    """Everything :func:`parse_load_log` found, in log order."""

    kv_caches: tuple[KvCacheLine, ...] = ()
    recurrent: tuple[RecurrentLine, ...] = ()
    buffers: tuple[BufferLine, ...] = ()
    iswa_caches: tuple[IswaCacheLine, ...] = ()
    context: ContextParams = field(default_factory=ContextParams)
    listening_url: str | None = None
    failures: tuple[Failure, ...] = ()

    @property
    def ready(self) -> bool:
        """The server got as far as listening."""
        return self.listening_url is not None


_NUM = r"(\d+(?:\.\d+)?)"
_KV_SIZE = re.compile(
    rf"llama_kv_cache: size =\s*{_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,"
    rf"\s*(\d+)/\s*(\d+) seqs\),"
    rf" K \(([\w.]+)\):\s*{_NUM} MiB, V \(([\w.]+)\):\s*{_NUM} MiB"
)
_RS_SIZE = re.compile(
    rf"llama_memory_recurrent: size =\s*{_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+) seqs"
    rf"(?:\s+(\d+) rs_seq)?\), R \(([\w.]+)\):\s*{_NUM} MiB, S \(([\w.]+)\):\s*{_NUM} MiB"
    rf"(?:, P \([\w.]+\):\s*{_NUM} MiB)?"
)
_BUFFER = re.compile(rf"(\w+):\s+(\S+)\s+(model|KV|RS|compute|output) buffer size =\s*{_NUM} MiB")
_ISWA = re.compile(r"llama_kv_cache_iswa: creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
_CONTEXT = re.compile(
    r"llama_context: (n_ctx|n_ctx_seq|n_seq_max|n_batch|n_ubatch|flash_attn|kv_unified|causal_attn"
    r"|n_rs_seq)\s+=\s+(\S+)\s*$"
)
_LISTENING = re.compile(r"listening on (https?://\S+)")
_FAILURES: tuple[tuple[FailureKind, re.Pattern[str]], ...] = (
    (FailureKind.UNKNOWN_ARCHITECTURE, re.compile(r"unknown model architecture: '([^']*)'")),
    (
        FailureKind.BIND_FAILED,
        re.compile(r"couldn't bind HTTP server socket(?:, hostname: \S+, port: (\d+))?"),
    ),
    (
        FailureKind.QUANTIZED_V_NEEDS_FLASH_ATTN,
        re.compile(
            r"quantized V cache (?:was requested, but this )?requires "
            r"(?:Flash Attention|flash_attn)"
        ),
    ),
    (
        FailureKind.KV_TYPES_MUST_MATCH,
        re.compile(r"model does not support different K \((\S+)\) and V \((\S+)\) cache types"),
    ),
    (
        FailureKind.OUT_OF_MEMORY,
        re.compile(
            r"out of memory|insufficient memory|failed to allocate(?: (\S+) buffer of size (\d+))?"
            r"|unable to allocate(?: (\S+) buffer)?"
        ),
    ),
    (
        FailureKind.CONTEXT_FAILED,
        re.compile(r"failed to create[_ ]context|failed to initialize the context"),
    ),
    (FailureKind.LOAD_FAILED, re.compile(r"failed to load model|error loading model")),
    (FailureKind.INVALID_ARGUMENT, re.compile(r"error: invalid argument: (.*)$")),
    (FailureKind.ABORTED, re.compile(r"GGML_ASSERT\((.*)\) failed|GGML_ABORT")),
)


def parse_kv_cache_line(line: str, *, swa: bool | None = None) -> KvCacheLine | None:
    """The KV "size =" line in ``line``, or None."""
    m = _KV_SIZE.search(line)
    if m is None:
        return None
    size, cells, layers, seqs, streams, tk, k, tv, v = m.groups()
    return KvCacheLine(
        float(size),
        int(cells),
        int(layers),
        int(seqs),
        int(streams),
        tk,
        float(k),
        tv,
        float(v),
        swa,
    )


def parse_recurrent_line(line: str) -> RecurrentLine | None:
    """The recurrent-state "size =" line in ``line``, or None."""
    m = _RS_SIZE.search(line)
    if m is None:
        return None
    size, cells, layers, seqs, rs_seq, tr, r, ts, s, p = m.groups()
    return RecurrentLine(
        float(size),
        int(cells),
        int(layers),
        int(seqs),
        int(rs_seq or 0),
        tr,
        float(r),
        ts,
        float(s),
        None if p is None else float(p),
    )


def parse_buffer_line(line: str) -> BufferLine | None:
    """A "<device> <kind> buffer size = X MiB" line, or None."""
    m = _BUFFER.search(line)
    if m is None:
        return None
    return BufferLine(m.group(1), m.group(2), m.group(3), float(m.group(4)))


def parse_failure_line(line: str) -> Failure | None:
    """The first failure kind ``line`` matches, or None."""
    for kind, pattern in _FAILURES:
        m = pattern.search(line)
        if m is not None:
            detail = next((g.strip() for g in m.groups() if g), None) if m.groups() else None
            return Failure(kind, line.strip(), detail)
    return None


def parse_context_params(raw: dict[str, str]) -> ContextParams:
    """``ContextParams`` from ``{name: logged value}`` of ``llama_context:`` lines."""

    def number(name: str) -> int | None:
        return int(raw[name]) if name in raw else None

    def flag(name: str) -> bool | None:
        return raw[name] not in ("0", "false") if name in raw else None

    return ContextParams(
        n_ctx=number("n_ctx"),
        n_ctx_seq=number("n_ctx_seq"),
        n_seq_max=number("n_seq_max"),
        n_batch=number("n_batch"),
        n_ubatch=number("n_ubatch"),
        flash_attn=raw.get("flash_attn"),
        kv_unified=flag("kv_unified"),
        causal_attn=flag("causal_attn"),
        n_rs_seq=number("n_rs_seq"),
    )


def parse_load_log(text: str) -> LoadLog:
    """Parse a whole llama-server log (see module docstring for what is read)."""
    kv: list[KvCacheLine] = []
    rs: list[RecurrentLine] = []
    buffers: list[BufferLine] = []
    iswa: list[IswaCacheLine] = []
    failures: list[Failure] = []
    ctx: dict[str, str] = {}
    url: str | None = None
    pending_swa: bool | None = None
    for line in text.splitlines():
        if (m := _ISWA.search(line)) is not None:
            pending_swa = m.group(1) == "SWA"
            iswa.append(IswaCacheLine(pending_swa, int(m.group(2))))
        elif (kv_line := parse_kv_cache_line(line, swa=pending_swa)) is not None:
            kv.append(kv_line)
            pending_swa = None
        elif (rs_line := parse_recurrent_line(line)) is not None:
            rs.append(rs_line)
        elif (buf := parse_buffer_line(line)) is not None:
            buffers.append(buf)
        elif (m := _CONTEXT.search(line)) is not None:
            ctx.setdefault(m.group(1), m.group(2))  # the first context is the server's
        elif (m := _LISTENING.search(line)) is not None:
            url = url or m.group(1)
        elif (failure := parse_failure_line(line)) is not None:
            failures.append(failure)
    return LoadLog(
        tuple(kv),
        tuple(rs),
        tuple(buffers),
        tuple(iswa),
        parse_context_params(ctx),
        url,
        tuple(failures),
    )
