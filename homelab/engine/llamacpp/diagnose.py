"""llama-server's failures, explained with a next step; and its profile for the supervisor.

The log lines are recognised by ``homelab.engine.llamacpp.log`` (pinned build
b11312). This module picks the line that says most (an unknown architecture
before the "failed to load model" that follows it), quotes the engine's own
error lines, and turns it into a message with a next step; with the plan at
hand the step carries numbers ("KV did not fit: try `ctx` 4096"). Settings are named in
backquotes; each front-end words them (the CLI as flags).

A failure that would repeat identically with the same file and flags (unknown
architecture, damaged file, refused flag) is marked *permanent*, so the
supervisor gives up at once instead of restarting into the same wall.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from homelab.engine.llamacpp.kind import LlamaCpp
from homelab.engine.llamacpp.log import Failure, FailureKind, parse_failure_line
from homelab.engine.supervision.failure import (
    QUOTE_LINES,
    EngineFailure,
    describe_exit,
    unexplained,
)
from homelab.engine.supervision.readiness import EngineProfile
from homelab.errors import (
    DoesNotFitError,
    EngineError,
    HomelabError,
    ModelFileError,
    UnknownArchitectureError,
)
from homelab.units import format_bytes

if TYPE_CHECKING:
    from homelab.plan.planner import Plan

SERVING_LINE = re.compile(r"(?:server is )?listening on https?://\S+")
"""``llama_server: listening on http://127.0.0.1:8080`` (older: ``server is listening on``)."""
_PREFIX = re.compile(r"^\s*\d+\.\d+\.\d+\.\d+ [IWEDT] (?:[a-z]{3}\s{2,})?")
_ERROR_LEVEL = re.compile(r"^\s*\d+\.\d+\.\d+\.\d+ E ")

# Most telling first: the specific line beats the generic "failed to load model" after it.
_PRIORITY = (
    FailureKind.UNKNOWN_ARCHITECTURE,
    FailureKind.BIND_FAILED,
    FailureKind.INVALID_ARGUMENT,
    FailureKind.QUANTIZED_V_NEEDS_FLASH_ATTN,
    FailureKind.KV_TYPES_MUST_MATCH,
    FailureKind.OUT_OF_MEMORY,
    FailureKind.ABORTED,
    FailureKind.LOAD_FAILED,
    FailureKind.CONTEXT_FAILED,
)
_PERMANENT = {
    FailureKind.UNKNOWN_ARCHITECTURE,
    FailureKind.INVALID_ARGUMENT,
    FailureKind.QUANTIZED_V_NEEDS_FLASH_ATTN,
    FailureKind.KV_TYPES_MUST_MATCH,
    FailureKind.LOAD_FAILED,
}


def strip_prefix(line: str) -> str:
    """The text of a log line without llama.cpp's ``S.MM.SSS.mmm L`` prefix."""
    return _PREFIX.sub("", line).strip()


def _error_lines(lines: Sequence[str], key: Failure | None) -> tuple[str, ...]:
    """The engine's distinct error lines, the key one first, at most QUOTE_LINES."""
    seen: list[str] = []
    if key is not None:
        seen.append(strip_prefix(key.line))
    for line in lines:
        if _ERROR_LEVEL.match(line) or (not _PREFIX.match(line) and parse_failure_line(line)):
            text = strip_prefix(line)
            if text and text not in seen:
                seen.append(text)
    if not seen:
        return tuple(strip_prefix(line) for line in lines[-QUOTE_LINES:] if line.strip())
    return tuple(seen[:QUOTE_LINES])


def _key_failure(failures: Sequence[Failure]) -> Failure | None:
    for kind in _PRIORITY:
        matching = [f for f in failures if f.kind is kind]
        if kind is FailureKind.LOAD_FAILED:  # "error loading model: <reason>" says why
            matching.sort(key=lambda f: "error loading model:" not in f.line)
        if matching:
            return matching[0]
    return None


def _what_ran_out(lines: Sequence[str]) -> str:
    text = "\n".join(lines).lower()
    if "kv cache" in text:
        return "kv"
    if "compute" in text:
        return "compute"
    return "weights" if "load_tensors" in text or "unable to allocate" in text else "memory"


def _smaller_ctx_hint(plan: Plan | None) -> str:
    if plan is None:
        return "try a smaller `ctx`, or close programs that use the GPU"
    n_seq = plan.settings.n_seq
    n_ctx = plan.candidate.allocation.n_ctx
    step = 256 * n_seq
    half = max(step, (n_ctx // 2) // step * step)
    return (
        f"the plan expected {format_bytes(plan.candidate.allocation.total)} of KV "
        f"for {n_ctx:,} tokens to fit; "
        f"something may have taken memory since: try `ctx` {half} `slots` {n_seq}, "
        "or close programs that use the GPU"
    )


_Explained = tuple[str, str, str | None, type[HomelabError]]
"""(title, message, hint, error type); the message's ``{what}``, ``{detail}``, ``{port}`` and
``{abort}`` are filled from the failure; a hint of None is the smaller-context step."""

_EXPLAINED: dict[FailureKind, _Explained] = {
    FailureKind.UNKNOWN_ARCHITECTURE: (
        "Unknown architecture",
        "this llama-server does not know the architecture '{detail}' of {what}",
        "a newer llama.cpp may: point HOMELAB_LLAMA_SERVER at a newer llama-server build",
        UnknownArchitectureError,
    ),
    FailureKind.LOAD_FAILED: (
        "Bad model file",
        "llama-server could not load {what}",
        "the file may be truncated or damaged: check its size, or download it again",
        ModelFileError,
    ),
    FailureKind.BIND_FAILED: (
        "Port in use",
        "llama-server could not listen on {port}: another program took it",
        "pick another `port`, or leave `port` unset and homelab takes the next free one",
        EngineError,
    ),
    FailureKind.INVALID_ARGUMENT: (
        "Flag refused",
        "this llama-server does not accept the flag {detail}",
        "it is older or newer than the build homelab plans for: run `homelab engine build`",
        EngineError,
    ),
    FailureKind.QUANTIZED_V_NEEDS_FLASH_ATTN: (
        "Quantized V cache needs flash attention",
        "llama-server refuses a quantized V cache without flash attention",
        "use `cache_type_v` f16, or keep flash attention on",
        EngineError,
    ),
    FailureKind.KV_TYPES_MUST_MATCH: (
        "K and V cache types must match",
        "this model refuses different K and V cache types ({detail})",
        "use one type for both, e.g. `cache_type` q8_0",
        EngineError,
    ),
    FailureKind.ABORTED: (
        "Engine aborted",
        "llama-server aborted: {abort}",
        "this is a llama.cpp assertion: try other cache types or a smaller `ubatch`, "
        "and report it upstream with the log",
        EngineError,
    ),
    FailureKind.CONTEXT_FAILED: (
        "Context creation failed",
        "llama-server loaded the model but could not create its context",
        "check the cache types and flash-attention setting in the quoted lines",
        EngineError,
    ),
}
"""Each failure kind but running out of memory, explained."""

_RAN_OUT: dict[str, _Explained] = {
    "kv": (
        "KV cache did not fit",
        "llama-server could not allocate the KV cache",
        None,
        DoesNotFitError,
    ),
    "compute": (
        "Compute buffer did not fit",
        "llama-server could not allocate its compute buffer",
        "try `ubatch` 256 (the compute buffer grows with it), or a smaller `ctx`",
        DoesNotFitError,
    ),
    "weights": (
        "Weights did not fit",
        "llama-server could not allocate the weights of {what}",
        "close programs that use the GPU, or pick a smaller quant",
        DoesNotFitError,
    ),
    "memory": ("Out of memory", "llama-server ran out of memory", None, DoesNotFitError),
}
"""Running out of memory, explained by what ran out (:func:`_what_ran_out`)."""


def _explain(
    key: Failure, lines: Sequence[str], plan: Plan | None, model: str | None
) -> _Explained:
    """(title, message, hint, error type) for a recognised failure."""
    if key.kind is FailureKind.OUT_OF_MEMORY:
        title, message, hint, error_type = _RAN_OUT[_what_ran_out(lines)]
    else:
        title, message, hint, error_type = _EXPLAINED[key.kind]
    message = message.format(
        what=model or "the model",
        detail=key.detail,
        port=f"port {key.detail}" if key.detail else "its port",
        abort=key.detail or "GGML_ABORT",
    )
    return title, message, _smaller_ctx_hint(plan) if hint is None else hint, error_type


def diagnose_llama_server(
    lines: Sequence[str],
    returncode: int | None,
    *,
    plan: Plan | None = None,
    model: str | None = None,
) -> EngineFailure:
    """Why llama-server stopped, from the log lines of that run and its exit code."""
    failures = [f for f in (parse_failure_line(line) for line in lines) if f is not None]
    key = _key_failure(failures)
    if key is None:
        return unexplained(
            LlamaCpp.program, returncode, [strip_prefix(line) for line in lines if line.strip()]
        )
    title, message, hint, error_type = _explain(key, lines, plan, model)
    return EngineFailure(
        title=title,
        message=f"{message} ({LlamaCpp.program} {describe_exit(returncode)})",
        hint=hint,
        quoted=_error_lines(lines, key),
        returncode=returncode,
        kind=key.kind.value,
        permanent=key.kind in _PERMANENT,
        port_conflict=key.kind is FailureKind.BIND_FAILED,
        error_type=error_type,
    )


def llama_server_profile(plan: Plan | None = None, model: str | None = None) -> EngineProfile:
    """The supervisor's view of llama-server; ``plan`` makes failure hints concrete."""

    def diagnose(lines: Sequence[str], returncode: int | None) -> EngineFailure:
        return diagnose_llama_server(lines, returncode, plan=plan, model=model)

    return EngineProfile(
        name=LlamaCpp.program,
        serving_line=SERVING_LINE,
        diagnose=diagnose,
        env={"LLAMA_ARG_LOG_COLORS": "off"},
        key_env="LLAMA_API_KEY",
        kind=LlamaCpp.name,
    )
