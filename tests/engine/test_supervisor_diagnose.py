"""llama-server failures explained: the telling line chosen, the engine quoted, a next step given.

On the real logs in ``tests/fixtures/llama_logs`` (captured from llama-server
b11312 by ``python -m tests.factory.capture_fixtures``) and, for the running
engine's exit, real exit codes.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from homelab.cli.stop_status import word
from homelab.engine.llamacpp.diagnose import diagnose_llama_server, strip_prefix
from homelab.engine.supervision.failure import describe_exit
from homelab.errors import (
    DoesNotFitError,
    EngineError,
    ExitCode,
    ModelFileError,
    UnknownArchitectureError,
)

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "llama_logs"


def lines_of(name: str) -> list[str]:
    return (LOGS / f"{name}.log").read_text().splitlines()


@pytest.mark.parametrize(
    ("log", "title", "kind", "error_type", "permanent", "first_quote"),
    [
        (
            "fail-unknown-arch__c4096",
            "Unknown architecture",
            "unknown_architecture",
            UnknownArchitectureError,
            True,
            "llama_model_load: error loading model: unknown model architecture: 'xyzzy'",
        ),
        (
            "fail-missing-file__c4096",
            "Bad model file",
            "load_failed",
            ModelFileError,
            True,
            "llama_model_load: error loading model: llama_model_loader: failed to load model from",
        ),
        (
            "fail-port-in-use__c4096",
            "Port in use",
            "bind_failed",
            EngineError,
            False,
            "start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 54767",
        ),
        (
            "fail-quantized-v-no-fa__c4096_ctv-q8_0_fa-off",
            "Quantized V cache needs flash attention",
            "quantized_v_needs_flash_attn",
            EngineError,
            True,
            "llama_init_from_model: quantized V cache requires flash_attn to be enabled",
        ),
        (
            "fail-kv-too-big__c4194304_np1_ctk-f16_ctv-f16",
            "KV cache did not fit",
            "out_of_memory",
            DoesNotFitError,
            False,
            "ggml_aligned_malloc: insufficient memory (attempted to allocate 524288.00 MB)",
        ),
    ],
)
def test_each_captured_failure(
    log: str, title: str, kind: str, error_type: type, permanent: bool, first_quote: str
) -> None:
    failure = diagnose_llama_server(lines_of(log), 1, model="m.gguf")
    assert (failure.title, failure.kind, failure.error_type, failure.permanent) == (
        title,
        kind,
        error_type,
        permanent,
    )
    assert failure.quoted[0].startswith(first_quote)
    assert len(failure.quoted) == len(set(failure.quoted)) <= 6  # distinct lines, bounded
    assert failure.message.endswith("(llama-server exited with code 1)")
    assert failure.hint
    error = failure.to_error()
    assert isinstance(error, error_type) and "the engine said:" in error.message
    assert first_quote in error.message and error.hint == failure.hint


def test_kv_did_not_fit_hint_comes_from_the_plan(tmp_path: Path) -> None:
    from homelab.gguf.model_file import read_model
    from homelab.gpu.report import synthetic_report
    from homelab.plan.planner import PlanRequest, make_plan
    from tests.factory import write_gguf

    model_path = write_gguf("llama", tmp_path / "llama.gguf")
    plan = make_plan(
        read_model(model_path),
        str(model_path),
        synthetic_report(16 << 30),
        PlanRequest(ctx=16384, parallel=2),
    )
    failure = diagnose_llama_server(
        lines_of("fail-kv-too-big__c4194304_np1_ctk-f16_ctv-f16"), 1, plan=plan
    )
    assert (
        failure.error_type is DoesNotFitError
        and failure.to_error().exit_code == ExitCode.DOES_NOT_FIT
    )
    assert "try `ctx` 8192 `slots` 2" in failure.hint  # settings, not flags
    assert "try --ctx 8192 --parallel 2" in word(failure.hint)  # as the CLI words them
    assert "for 16,384 tokens" in failure.hint


def test_an_exit_the_log_does_not_explain() -> None:
    lines = [
        "0.00.001.000 I srv  llama_server: listening on http://127.0.0.1:8080",
        "0.00.002.000 I srv  update_slots: all slots are idle",
    ]
    failure = diagnose_llama_server(lines, -signal.SIGKILL)
    assert (
        failure.title == "llama-server stopped" and failure.kind is None and not failure.permanent
    )
    assert failure.message == "llama-server was killed by SIGKILL"
    assert "out-of-memory killer" in failure.hint
    assert failure.quoted == (
        "llama_server: listening on http://127.0.0.1:8080",
        "update_slots: all slots are idle",
    )


def test_exit_descriptions_and_prefix_stripping() -> None:
    assert describe_exit(None) == "exited"
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-15) == "was killed by SIGTERM"
    assert strip_prefix("0.00.004.848 E srv    load_model: failed") == "load_model: failed"
    assert strip_prefix("0.00.004.734 E llama_model_load: error") == "llama_model_load: error"
    assert strip_prefix("plain line") == "plain line"
