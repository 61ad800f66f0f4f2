"""KV maths against the numbers the research notes derive from llama.cpp's source,
and the seed article's worked example."""

from __future__ import annotations

import pytest
from metadata_headers import deepseek_v3, gemma3_27b, gpt_oss_20b, header, llama31_8b, seed_qwen35

from homelab.errors import UnknownArchitectureError, UsageError
from homelab.gguf.geometry import geometry_of
from homelab.plan.fit import Fitter
from homelab.plan.kv import KvSettings, context_cells, kv_allocation
from homelab.units import GiB, MiB


def test_seed_article_bytes_per_token() -> None:
    geometry = geometry_of(seed_qwen35())
    assert geometry.n_layer_all == 32
    assert len(geometry.kv_layers) == 8
    assert [layer.index for layer in geometry.kv_layers] == [3, 7, 11, 15, 19, 23, 27, 31]
    assert len(geometry.recurrent_layers) == 24
    alloc = kv_allocation(geometry, KvSettings(n_ctx=4096))
    # 2 × 8 layers × 4 kv heads × 256 × 34/32 B
    assert alloc.bytes_per_token == 2 * 8 * 4 * 256 * 34 // 32 == 17_408


def test_seed_article_five_agents_in_9_1_gib() -> None:
    """9.1 GiB for conversations → ~560,000 tokens → 5 agents of 100k (no CUDA scratch, as the article)."""
    geometry = geometry_of(seed_qwen35())
    fitter = Fitter(geometry, int(9.1 * GiB), KvSettings(n_ctx=0), on_gpu=False, measured_compute=0)
    # measured_compute=0 on a CPU plan: the only cost is KV + the recurrent state, as in the article
    one_slot = fitter.max_ctx(1)
    assert one_slot % 256 == 0
    assert 555_000 <= one_slot <= int(9.1 * GiB) // 17_408  # "about 560,000 tokens"
    assert fitter.max_slots(100_096, 32) == 5  # "5 agents of 100k"


@pytest.mark.parametrize(
    ("ctx", "n_seq", "unified", "expected"),
    [
        (8192, 3, False, (8448, 2816, 3)),  # memory-estimation.md §1.1 example
        (2048, 2, False, (2048, 1024, 2)),
        (4000, 1, False, (4096, 4096, 1)),
        (100_000, 4, True, (100_096, 100_096, 1)),
    ],
)
def test_context_padding_and_split(ctx, n_seq, unified, expected) -> None:
    assert context_cells(KvSettings(n_ctx=ctx, n_seq=n_seq, unified=unified), 131_072) == expected


def test_llama_8b_q8_0_32k() -> None:
    geometry = geometry_of(llama31_8b())
    alloc = kv_allocation(geometry, KvSettings(n_ctx=32_768))
    assert alloc.total == 2 * 32 * 1024 * 34 // 32 * 32_768
    assert alloc.swa_bytes == 0 and alloc.recurrent_bytes == 0


def test_gpt_oss_swa_cells() -> None:
    """§1.9: 12 full layers 1632 MiB at 131072, SWA pad(128+512)=768 cells → 9.6 MiB."""
    geometry = geometry_of(gpt_oss_20b())
    assert len(geometry.swa_layers) == 12 and len(geometry.full_layers) == 12
    assert all(layer.kind == "swa" for layer in geometry.layers[0::2])
    alloc = kv_allocation(geometry, KvSettings(n_ctx=131_072))
    assert alloc.swa_cells == 768
    assert alloc.full_bytes == 1632 * MiB
    assert alloc.swa_bytes == 12 * 2 * 512 * 34 // 32 * 768
    unified = kv_allocation(geometry, KvSettings(n_ctx=131_072, n_seq=4, unified=True))
    assert unified.swa_cells == 1024  # pad(128 × 4 + 512)
    split = kv_allocation(geometry, KvSettings(n_ctx=131_072, n_seq=4))
    assert split.swa_cells == 768 and split.n_stream == 4


def test_gemma3_pattern_last_of_six_is_full() -> None:
    geometry = geometry_of(gemma3_27b())
    assert [layer.index for layer in geometry.full_layers][:3] == [5, 11, 17]
    assert len(geometry.full_layers) == 10 and len(geometry.swa_layers) == 52
    alloc = kv_allocation(geometry, KvSettings(n_ctx=32_768))
    assert alloc.full_bytes == 1360 * MiB
    assert alloc.swa_cells == 1536


def test_mla_is_k_only() -> None:
    geometry = geometry_of(deepseek_v3())
    assert geometry.is_mla
    alloc = kv_allocation(geometry, KvSettings(n_ctx=32_768))
    assert alloc.full_v == 0
    assert alloc.bytes_per_token == 61 * 576 * 34 // 32
    f16 = kv_allocation(geometry, KvSettings(n_ctx=32_768, type_k="f16", type_v="f16"))
    assert f16.bytes_per_token == 61 * 576 * 2


def test_v_rows_padded_without_flash_attention() -> None:
    mixed = header(
        "llama",
        block_count=2,
        context_length=4096,
        embedding_length=256,
        attention__head_count=4,
        attention__head_count_kv=[2, 4],
    )
    geometry = geometry_of(mixed)
    fa = kv_allocation(geometry, KvSettings(n_ctx=4096, type_k="f16", type_v="f16"))
    no_fa = kv_allocation(
        geometry, KvSettings(n_ctx=4096, type_k="f16", type_v="f16", flash_attn=False)
    )
    assert fa.full_v == (2 * 64 + 4 * 64) * 2 * 4096
    assert no_fa.full_v == 2 * (4 * 64) * 2 * 4096


def test_quantized_v_needs_flash_attention() -> None:
    with pytest.raises(UsageError, match="flash attention"):
        KvSettings(n_ctx=4096, type_v="q8_0", flash_attn=False)


def test_unknown_cache_type_and_arch() -> None:
    with pytest.raises(UsageError, match="q3_k"):
        KvSettings(n_ctx=4096, type_k="q3_k")
    with pytest.raises(UnknownArchitectureError, match="frobnicator"):
        geometry_of(header("frobnicator", block_count=2, context_length=1, embedding_length=8))


def test_nextn_layers_excluded() -> None:
    h = header(
        "llama",
        block_count=4,
        nextn_predict_layers=1,
        context_length=4096,
        embedding_length=256,
        attention__head_count=2,
    )
    geometry = geometry_of(h)
    assert len(geometry.kv_layers) == 3
    assert geometry.layers[3].why_none is not None
