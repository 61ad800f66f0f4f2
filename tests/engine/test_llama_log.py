"""homelab.engine.llamacpp.log: parsing llama-server's load log.

Real logs (``tests/fixtures/llama_logs/``, captured from llama-server b11312 /
0c1e570 on CPU with ``-lv 4`` by ``python -m tests.factory.capture_fixtures``;
the file name says model and arguments) plus synthetic lines for formats the
CPU captures cannot show (CUDA devices, older builds).
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from homelab.engine.llamacpp.log import (
    MIB,
    BufferLine,
    FailureKind,
    KvCacheLine,
    RecurrentLine,
    mib_byte_range,
    parse_buffer_line,
    parse_failure_line,
    parse_kv_cache_line,
    parse_load_log,
    parse_recurrent_line,
)
from tests.factory.mib import buffer_mib, mib_matches

LOGS = Path(__file__).resolve().parent.parent / "fixtures" / "llama_logs"
A = "c4096_np1_ctk-q8_0_ctv-q8_0_fa-on_norepack"
B = "c8192_np3_ctk-f16_ctv-q4_0_fa-on_norepack"


def load(name: str):
    return parse_load_log((LOGS / f"{name}.log").read_text(encoding="utf-8"))


# -- real captured logs ---------------------------------------------------------------


def test_llama_q8_single_slot() -> None:
    log = load(f"llama__{A}")
    assert log.ready and log.listening_url.startswith("http://127.0.0.1:")
    assert not log.failures
    c = log.context
    assert (c.n_ctx, c.n_ctx_seq, c.n_seq_max, c.n_batch, c.n_ubatch) == (4096, 4096, 1, 2048, 512)
    assert (c.flash_attn, c.kv_unified, c.causal_attn, c.n_rs_seq) == ("enabled", False, True, 0)
    assert log.kv_caches == (KvCacheLine(272.0, 4096, 32, 1, 1, "q8_0", 136.0, "q8_0", 136.0),)
    # 32 layers x 4096 cells x 1024 (8 kv heads x 128) x 34/32 bytes, for K and for V
    assert mib_matches(32 * 4096 * 1024 * 34 // 32, log.kv_caches[0].k_mib, single_precision=True)
    assert buffer_mib(log, "KV") == 272.0
    assert buffer_mib(log, "model", "CPU_Mapped") > 0
    assert [b.kind for b in log.buffers] == ["model", "output", "KV", "compute"]
    assert log.recurrent == () and log.iswa_caches == ()


def test_llama_split_three_slots_grows_n_ctx() -> None:
    log = load(f"llama__{B}")
    c = log.context
    assert (c.n_ctx, c.n_ctx_seq, c.n_seq_max, c.kv_unified) == (8448, 2816, 3, False)
    (kv,) = log.kv_caches
    assert (kv.cells, kv.n_stream, kv.cells * kv.n_stream, kv.type_k, kv.type_v) == (
        2816,
        3,
        8448,
        "f16",
        "q4_0",
    )
    assert (kv.k_mib, kv.v_mib, kv.size_mib) == (528.0, 148.5, 676.5)


def test_gemma3_iswa_lines_are_tagged_swa_or_not() -> None:
    log = load(f"gemma3__{A}")
    assert [(i.swa, i.cells) for i in log.iswa_caches] == [(False, 4096), (True, 1536)]
    base, swa = log.kv_caches
    assert (base.swa, base.layers, base.cells, base.size_mib) == (False, 8, 4096, 136.0)
    assert (swa.swa, swa.layers, swa.cells, swa.size_mib) == (True, 40, 1536, 255.0)
    assert [b.mib for b in log.buffers if b.kind == "KV"] == [136.0, 255.0]


def test_gpt_oss_three_slots_swa_per_stream() -> None:
    base, swa = load(f"gpt-oss__{B}").kv_caches
    assert (base.cells, base.n_stream, base.size_mib) == (2816, 3, 126.84)
    assert (swa.cells, swa.n_stream, swa.size_mib) == (768, 3, 34.59)


def test_qwen35_hybrid_has_kv_and_recurrent_state() -> None:
    log = load(f"qwen35__{B}")
    (kv,) = log.kv_caches
    assert (kv.layers, kv.cells, kv.n_stream) == (8, 2816, 3)
    assert log.recurrent == (RecurrentLine(150.75, 3, 32, 3, 0, "f32", 6.75, "f32", 144.0, 0.0),)
    assert buffer_mib(log, "RS") == 150.75
    # 24 GDN layers x 3 seqs x 524288 floats
    assert mib_matches(24 * 3 * 128 * 4096 * 4, log.recurrent[0].s_mib, single_precision=True)


def test_deepseek2_mla_is_k_only_and_refuses_mixed_types() -> None:
    (kv,) = load(f"deepseek2__{A}").kv_caches
    assert (kv.layers, kv.k_mib, kv.v_mib) == (27, 64.55, 0.0)
    assert mib_matches(27 * 4096 * 576 * 34 // 32, kv.k_mib, single_precision=True)
    failed = load(f"deepseek2__{B}")
    assert not failed.ready and failed.kv_caches == ()
    mixed = [f for f in failed.failures if f.kind is FailureKind.KV_TYPES_MUST_MATCH]
    assert mixed and mixed[0].detail == "f16"
    assert FailureKind.CONTEXT_FAILED in {f.kind for f in failed.failures}
    (kv,) = load("deepseek2__c8192_np3_ctk-q4_0_ctv-q4_0_fa-on_norepack").kv_caches
    assert (kv.type_k, kv.cells, kv.n_stream, kv.v_mib) == ("q4_0", 2816, 3, 0.0)


@pytest.mark.parametrize(
    ("name", "kind", "detail"),
    [
        ("fail-missing-file__c4096", FailureKind.LOAD_FAILED, None),
        ("fail-unknown-arch__c4096", FailureKind.UNKNOWN_ARCHITECTURE, "xyzzy"),
        (
            "fail-quantized-v-no-fa__c4096_ctv-q8_0_fa-off",
            FailureKind.QUANTIZED_V_NEEDS_FLASH_ATTN,
            None,
        ),
        ("fail-kv-too-big__c4194304_np1_ctk-f16_ctv-f16", FailureKind.OUT_OF_MEMORY, None),
        ("fail-port-in-use__c4096", FailureKind.BIND_FAILED, r"\d{2,5}"),
    ],
)
def test_failure_logs(name: str, kind: FailureKind, detail: str | None) -> None:
    """``detail`` is a regex the failure's detail must match (None: not checked)."""
    log = load(name)
    assert not log.ready and log.kv_caches == ()
    found = [f for f in log.failures if f.kind is kind]
    assert found, log.failures
    if detail is not None:
        assert re.fullmatch(detail, found[0].detail or ""), found[0]


def test_kv_too_big_keeps_context_values_and_failing_size() -> None:
    log = load("fail-kv-too-big__c4194304_np1_ctk-f16_ctv-f16")
    assert log.context.n_ctx == 4194304
    sized = [f for f in log.failures if f.kind is FailureKind.OUT_OF_MEMORY and f.detail == "CPU"]
    assert sized and "549755813888" in sized[0].line


def test_every_fixture_parses_to_ready_or_failure() -> None:
    names = sorted(LOGS.glob("*.log"))
    assert len(names) >= 15
    for path in names:
        log = parse_load_log(path.read_text(encoding="utf-8"))
        assert log.ready != bool(log.failures), path.name
        assert log.ready == bool(log.kv_caches), path.name


# -- synthetic lines ------------------------------------------------------------------


def test_kv_line_without_prefix_and_with_cuda_layout() -> None:
    line = (
        "llama_kv_cache: size = 2448.00 MiB ( 32768 cells,  36 layers,  4/1 seqs), "
        "K (q8_0): 1224.00 MiB, V (q8_0): 1224.00 MiB"
    )
    kv = parse_kv_cache_line(line)
    assert kv == KvCacheLine(2448.0, 32768, 36, 4, 1, "q8_0", 1224.0, "q8_0", 1224.0)
    assert kv.cells * kv.n_stream == 32768  # unified: one stream shared by 4 sequences
    assert parse_kv_cache_line("llama_kv_cache:      CUDA0 KV buffer size =  2448.00 MiB") is None


def test_recurrent_line_of_older_builds_without_p_and_rs_seq() -> None:
    line = (
        "I llama_memory_recurrent: size =   75.38 MiB (     1 cells,  48 layers,  1 seqs), "
        "R (f32):    3.38 MiB, S (f32):   72.00 MiB"
    )
    assert parse_recurrent_line(line) == RecurrentLine(75.38, 1, 48, 1, 0, "f32", 3.38, "f32", 72.0)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "load_tensors:        CUDA0 model buffer size =  4403.50 MiB",
            BufferLine("load_tensors", "CUDA0", "model", 4403.5),
        ),
        (
            "llama_context:  CUDA_Host  output buffer size =     0.58 MiB",
            BufferLine("llama_context", "CUDA_Host", "output", 0.58),
        ),
        (
            "0.00.1 I sched_reserve:      CUDA0 compute buffer size =   304.75 MiB",
            BufferLine("sched_reserve", "CUDA0", "compute", 304.75),
        ),
        (
            "llama_memory_recurrent:      CUDA1 RS buffer size =    75.38 MiB",
            BufferLine("llama_memory_recurrent", "CUDA1", "RS", 75.38),
        ),
        (
            "llama_kv_cache:      CUDA1 KV buffer size =  1632.00 MiB",
            BufferLine("llama_kv_cache", "CUDA1", "KV", 1632.0),
        ),
    ],
)
def test_buffer_lines(line: str, expected: BufferLine) -> None:
    assert parse_buffer_line(line) == expected


@pytest.mark.parametrize(
    ("line", "kind", "detail"),
    [
        (
            (
                "E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2448.00 MiB on device 0: "
                "cudaMalloc failed: out of memory"
            ),
            FailureKind.OUT_OF_MEMORY,
            None,
        ),
        (
            "E alloc_tensor_range: failed to allocate CUDA0 buffer of size 2566914048",
            FailureKind.OUT_OF_MEMORY,
            "CUDA0",
        ),
        (
            "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
            FailureKind.OUT_OF_MEMORY,
            "CUDA0",
        ),
        (
            (
                "llama_init_from_model: failed to initialize the context: "
                "failed to allocate compute pp buffers"
            ),
            FailureKind.OUT_OF_MEMORY,
            None,
        ),
        (
            "llama_model_load: error loading model: unknown model architecture: 'foo2'",
            FailureKind.UNKNOWN_ARCHITECTURE,
            "foo2",
        ),
        (
            (
                "llama_init_from_model: failed to initialize the context: "
                "quantized V cache was requested, "
                "but this requires Flash Attention"
            ),
            FailureKind.QUANTIZED_V_NEEDS_FLASH_ATTN,
            None,
        ),
        ("error: invalid argument: --no-mmap", FailureKind.INVALID_ARGUMENT, "--no-mmap"),
        (
            "/src/ggml-backend.cpp:1294: GGML_ASSERT(*cur_backend_id != -1) failed",
            FailureKind.ABORTED,
            "*cur_backend_id != -1",
        ),
        (
            "E srv    load_model: failed to create_context with model 'm.gguf'",
            FailureKind.CONTEXT_FAILED,
            None,
        ),
    ],
)
def test_failure_lines(line: str, kind: FailureKind, detail: str | None) -> None:
    failure = parse_failure_line(line)
    assert failure is not None and failure.kind is kind and failure.detail == detail


def test_warnings_and_info_are_not_failures() -> None:
    for line in (
        "W common_fit_params: failed to fit params to free device memory: n_gpu_layers already set",
        "I llama_context: n_ctx_seq (4096) < n_ctx_train (131072) -- the full capacity ...",
        "I common_params_fit_impl: will leave 23812 >= 1024 MiB of system memory, no changes",
    ):
        assert parse_failure_line(line) is None


def test_old_listening_line_and_first_context_value_win() -> None:
    text = (
        "llama_context: n_ctx                 = 8192\n"
        "llama_context: n_ctx                 = 4096\n"
        "llama_context: flash_attn            = auto\n"
        "llama_context: kv_unified            = true\n"
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n"
    )
    log = parse_load_log(text)
    assert (log.context.n_ctx, log.context.flash_attn, log.context.kv_unified) == (
        8192,
        "auto",
        True,
    )
    assert log.context.n_ubatch is None
    assert log.listening_url == "http://127.0.0.1:8080"


# -- MiB rounding -----------------------------------------------------------------------


def test_byte_range_of_known_values() -> None:
    assert mib_byte_range(272.0) == (272 * MIB - 5242, 272 * MIB + 5242)
    assert mib_matches(272 * MIB, 272.0)
    assert mib_byte_range(0.0) == (0, 5242)
    # 2 layers x 512 cells x 64 x 34/32 bytes = 69632 B prints as 0.07 MiB
    assert mib_matches(69632, 0.07) and not mib_matches(69632, 0.06)


def test_byte_range_agrees_with_printf_rounding() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randrange(0, 64 * 1024 * MIB)
        shown = float(f"{n / MIB:.2f}")
        lo, hi = mib_byte_range(shown)
        assert lo <= n <= hi
        assert float(f"{(lo - 1) / MIB:.2f}") != shown or lo == 0
        assert float(f"{(hi + 1) / MIB:.2f}") != shown


def test_single_precision_range_covers_float_division() -> None:
    import numpy as np

    rng = random.Random(11)
    for _ in range(2000):
        n = rng.randrange(0, 200 * 1024 * MIB)
        shown = float(f"{float(np.float32(n) / np.float32(MIB)):.2f}")
        assert mib_matches(n, shown, single_precision=True), n
