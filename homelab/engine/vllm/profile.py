"""The supervisor's view of vLLM: when it serves, and why it stopped.

Ready is ``/health`` answering OK *and* the log's ``Application startup complete.``
(the supervisor checks both); a failed start is explained from vLLM's own lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from homelab.engine.supervision.failure import EngineFailure
from homelab.engine.supervision.readiness import EngineProfile
from homelab.engine.vllm.kind import Vllm
from homelab.engine.vllm.log import failure_error, find_failure

SERVING_LINE = re.compile(r"Application startup complete")


def diagnose_vllm(lines: Sequence[str], returncode: int | None) -> EngineFailure:
    """Why one vLLM run stopped: a recognised refusal with its numbers, else the last lines."""
    failure = find_failure("\n".join(lines))
    if failure is not None:
        error = failure_error(failure)
        return EngineFailure(
            title=error.title,
            message=error.message,
            hint=error.hint,
            quoted=(failure.line,),
            returncode=returncode,
            kind=str(failure.kind),
            permanent=True,  # the same flags on the same card fail the same way
            error_type=type(error),
        )
    tail = tuple(line for line in lines[-12:] if line.strip())
    code = "unknown" if returncode is None else str(returncode)
    return EngineFailure(
        title="vLLM stopped",
        message=f"vLLM exited (code {code}) without an error homelab recognises",
        hint="Read the quoted lines and the log; `homelab plan --engine vllm` shows the priced plan.",
        quoted=tail,
        returncode=returncode,
    )


def vllm_profile() -> EngineProfile:
    """vLLM's serving line, health path and failure reader."""
    return EngineProfile(
        name=Vllm.program,
        serving_line=SERVING_LINE,
        diagnose=diagnose_vllm,
        key_env="VLLM_API_KEY",  # read when --api-key is not given (it checks /v1/* only)
    )
