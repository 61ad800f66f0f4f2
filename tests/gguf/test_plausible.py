"""Absurd geometry in a real header is a bad-model-file error naming the key, on the plan path.

Each case starts from a factory GGUF's real header and changes one thing a converter would
never write; ``homelab plan`` must exit 4 with a sentence naming the key and the value
(never a traceback, never a plan of "0 B/token"). A head width that a quantized KV cache
cannot hold is checked against the real llama-server, which refuses it the same way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from reencode import VT, Typed, encode, encode_header, factory_header

from homelab.cli import main
from homelab.gguf.geometry import geometry_of
from homelab.gguf.model_file import read_model
from homelab.gguf.plausible import check_cache_types

U32_MAX = 2**32 - 1


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return factory_header("llama", tmp_path_factory.mktemp("llama"))


def _plan(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["plan", str(path), "--vram", "16GiB", *extra])
    out, err = capsys.readouterr()
    return code, out, err


CASES = {
    # what the probe found: 2^32-1 KV heads planned as "0 B/token", short by a negative number
    "head_count_kv 2^32-1": (
        {"ARCH__attention__head_count_kv": U32_MAX},
        "'llama.attention.head_count_kv' is 4,294,967,295, outside what a real model has",
    ),
    "head_count_kv int32 -1": (
        {"ARCH__attention__head_count_kv": Typed(VT.INT32, -1)},
        "'llama.attention.head_count_kv' is negative (-1)",
    ),
    "head_count_kv per layer, one negative": (
        {"ARCH__attention__head_count_kv": [8] * 31 + [Typed(VT.INT32, -8)]},
        "'llama.attention.head_count_kv[31]' is negative (-8)",
    ),
    "head_count_kv 0 everywhere": (
        {"ARCH__attention__head_count_kv": 0},
        "no layer keeps a KV cache",
    ),
    "head_count 0": ({"ARCH__attention__head_count": 0}, "llama.attention.head_count is 0"),
    "key_length 0": ({"ARCH__attention__key_length": 0}, "K heads 0 wide"),
    "value_length 0": ({"ARCH__attention__value_length": 0}, "V heads 0 wide"),
    "key_length 2^31": (
        {"ARCH__attention__key_length": 2**31},
        "'llama.attention.key_length' is 2,147,483,648",
    ),
    "block_count 0": ({"ARCH__block_count": 0}, "'llama.block_count' is 0"),
    "block_count 2^40": ({"ARCH__block_count": 2**40}, "'llama.block_count' is 1,099,511,627,776"),
    "block_count above the tensors": (
        {"ARCH__block_count": 4000},
        "block_count is 4000, but the tensors stop at block 31",
    ),
    "block_count below the tensors": (
        {"ARCH__block_count": 16},
        "belongs to block 16, but llama.block_count is 16",
    ),
    "context_length 0": ({"ARCH__context_length": 0}, "'llama.context_length' is 0"),
    "context_length 2^63": (
        {"ARCH__context_length": 2**63},
        "'llama.context_length' is 9,223,372,036,854,775,808",
    ),
    "embedding_length 0": ({"ARCH__embedding_length": 0}, "'llama.embedding_length' is 0"),
    "feed_forward_length 2^62": (
        {"ARCH__feed_forward_length": 2**62},
        "'llama.feed_forward_length' is 4,611,686,018,427,387,904",
    ),
    "expert_used_count a string": (
        {"ARCH__expert_used_count": "8", "ARCH__expert_feed_forward_length": 64},
        "'llama.expert_used_count' should be an integer",
    ),
    "head_count_kv not dividing head_count": (  # found by tests/plan/test_plan_fuzz.py
        {"ARCH__attention__head_count_kv": 637},
        "'llama.attention.head_count_kv' is 637 at layer 0, which does not divide its 32",
    ),
    "head_count_kv a float": (
        {"ARCH__attention__head_count_kv": 8.0},
        "'llama.attention.head_count_kv' should be an integer or per-layer array",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_absurd_geometry_is_a_bad_model_file(
    case: str, llama, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    changes, expected = CASES[case]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(encode_header(llama, **changes))
    code, out, err = _plan(capsys, path)
    assert (code, out) == (4, ""), err
    assert err.startswith("homelab: Bad model file: ") and str(path) in err
    assert expected in err
    assert "Traceback" not in err


def test_the_unchanged_header_plans(llama, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The cases above fail because of their one change, not because of the re-encoding."""
    path = tmp_path / "same.gguf"
    path.write_bytes(encode_header(llama))
    code, out, err = _plan(capsys, path, "--workload", "chat")
    assert code == 0 and "Fits." in out, err


def test_an_unknown_tensor_type_is_a_bad_model_file_not_a_usage_error(
    llama, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    tensors = list(llama.tensors)
    tensors[3] = tensors[3]._replace(ggml_type=99)
    path = tmp_path / "newer.gguf"
    path.write_bytes(encode(llama.metadata, tensors))
    code, _, err = _plan(capsys, path)
    assert code == 4, err
    assert (
        f"1 tensor(s) have a ggml type homelab cannot size (type_99; e.g. {tensors[3].name!r})"
        in err
    )


def test_a_head_width_a_q8_0_cache_cannot_hold_is_refused_like_llama_server_does(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    from tests.factory import write_gguf

    path = write_gguf("llama", tmp_path / "hd40.gguf", head_dim=40)
    code, out, err = _plan(capsys, path)
    assert (code, out) == (2, ""), err
    assert "Cache type does not suit this model" in err
    assert "q8_0 stores values in blocks of 32, and the model's K heads are 40 wide" in err
    assert "llama.attention.key_length" in err and "f16" in err
    code, out, err = _plan(capsys, path, "--cache-type-k", "f16")
    assert code == 2 and "V heads are 40 wide (llama.attention.value_length" in err
    code, out, err = _plan(capsys, path, "--cache-type", "f16")
    assert code == 0 and "-ctk f16 -ctv f16" in out, err


def test_cache_type_check_takes_any_width_at_f16_and_whole_blocks_quantized(tmp_path: Path) -> None:
    from tests.factory import write_gguf

    layers = geometry_of(read_model(write_gguf("llama", tmp_path / "m.gguf"))).kv_layers
    for cache_type in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"):
        check_cache_types(layers, "llama", cache_type, cache_type)  # 128-wide heads: all fit


@pytest.mark.engine
def test_llama_server_itself_refuses_that_width_at_q8_0(
    tmp_path: Path, llama_server_bin: Path
) -> None:
    """The refusal above is llama.cpp's own rule, not a guess: the engine exits with it."""
    from tests.factory import write_gguf
    from tests.factory.server_log import free_port

    path = write_gguf("llama", tmp_path / "hd40.gguf", head_dim=40)
    argv = [str(llama_server_bin), "-m", str(path), "-c", "256", "-ctk", "q8_0", "-ctv", "f16"]
    argv += ["-fa", "on", "--host", "127.0.0.1", "--port", str(free_port()), "--no-repack"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "K cache type q8_0 with block size 32 does not divide n_embd_head_k=40" in (
        done.stdout + done.stderr
    )
