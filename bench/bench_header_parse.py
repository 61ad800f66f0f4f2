"""Benchmark: homelab's GGUF header reader against gguf-py's GGUFReader on a realistic header.

Run on demand (not a test): ``python bench/bench_header_parse.py [--repeat N]``.

It writes, in a temporary folder, a GGUF shaped like a Qwen2.5 Q4_K_M model: a
151,936-token byte-level BPE vocabulary (strings), its token types (int32), ~151k
merges (strings), a chat template, the usual ``qwen2.*`` keys and ~450 tensor infos
with Qwen names, shapes and types. The tensor data section exists only as a sparse
file (the file is truncated up to its full size), so GGUFReader can memory-map it and
neither reader touches real weights. It prints the best-of-N time of each reader, the
ratio (goal: homelab >= 10x faster), and how many bytes and reads homelab's cursor
used compared with the header's size (goal: <= 1.1x).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from homelab.gguf.ggml_types import tensor_bytes
from homelab.gguf.reader import read_header
from homelab.gguf.source import LocalFileSource
from homelab.units import format_bytes

N_VOCAB = 151_936
N_MERGES = 151_387
N_LAYER = 37  # 37 * 12 + 3 = 447 tensors
N_EMBD, N_FF, N_HEAD, N_HEAD_KV, HEAD_DIM = 3584, 18944, 28, 4, 128
QT = gguf.GGMLQuantizationType


def fake_vocab(rng: random.Random) -> list[str]:
    """Byte-level BPE-looking tokens: the 256 byte symbols, then words of growing length."""
    symbols = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 256)] + ["Ġ", "Ċ"]
    tokens = symbols[:256]
    letters = "abcdefghijklmnopqrstuvwxyz"
    while len(tokens) < N_VOCAB - 22:
        length = min(16, max(2, int(rng.gauss(6, 3))))
        word = "".join(rng.choice(letters) for _ in range(length))
        tokens.append(("Ġ" if rng.random() < 0.6 else "") + word)
    tokens += [f"<|special_{i}|>" for i in range(22)]
    return tokens


def fake_merges(tokens: list[str], rng: random.Random) -> list[str]:
    return [f"{rng.choice(tokens[:4000])} {rng.choice(tokens[256:20000])}" for _ in range(N_MERGES)]


def qwen_tensors() -> list[tuple[str, tuple[int, ...], QT]]:
    """(name, GGUF shape with ne0 first, type) like a Qwen2.5 Q4_K_M file."""
    kv = N_HEAD_KV * HEAD_DIM
    out: list[tuple[str, tuple[int, ...], QT]] = [("token_embd.weight", (N_EMBD, N_VOCAB), QT.Q4_K)]
    for layer in range(N_LAYER):
        big = QT.Q6_K if layer % 3 == 0 else QT.Q4_K
        out += [
            (f"blk.{layer}.attn_norm.weight", (N_EMBD,), QT.F32),
            (f"blk.{layer}.attn_q.weight", (N_EMBD, N_EMBD), QT.Q4_K),
            (f"blk.{layer}.attn_q.bias", (N_EMBD,), QT.F32),
            (f"blk.{layer}.attn_k.weight", (N_EMBD, kv), QT.Q4_K),
            (f"blk.{layer}.attn_k.bias", (kv,), QT.F32),
            (f"blk.{layer}.attn_v.weight", (N_EMBD, kv), big),
            (f"blk.{layer}.attn_v.bias", (kv,), QT.F32),
            (f"blk.{layer}.attn_output.weight", (N_EMBD, N_EMBD), QT.Q4_K),
            (f"blk.{layer}.ffn_norm.weight", (N_EMBD,), QT.F32),
            (f"blk.{layer}.ffn_gate.weight", (N_EMBD, N_FF), QT.Q4_K),
            (f"blk.{layer}.ffn_up.weight", (N_EMBD, N_FF), QT.Q4_K),
            (f"blk.{layer}.ffn_down.weight", (N_FF, N_EMBD), big),
        ]
    out += [
        ("output_norm.weight", (N_EMBD,), QT.F32),
        ("output.weight", (N_EMBD, N_VOCAB), QT.Q6_K),
    ]
    return out


def write_model(path: Path) -> None:
    rng = random.Random(1234)
    tokens = fake_vocab(rng)
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name("Qwen2.5 7B Instruct (bench)")
    writer.add_file_type(15)
    writer.add_context_length(32768)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * (N_VOCAB - 22) + [3] * 22)
    writer.add_token_merges(fake_merges(tokens, rng))
    writer.add_eos_token_id(151645)
    writer.add_pad_token_id(151643)
    template = "{%- for message in messages %}{{ message.content }}{%- endfor %}"
    writer.add_chat_template(template * 60)
    writer.add_quantization_version(2)
    total = 0
    for name, shape, ggml_type in qwen_tensors():
        n_bytes = tensor_bytes(int(ggml_type), shape)
        assert n_bytes is not None
        writer.add_tensor_info(
            name, tuple(reversed(shape)), np.dtype(np.float32), n_bytes, raw_dtype=ggml_type
        )
        total += -(-n_bytes // 32) * 32
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    header_size = path.stat().st_size
    data_offset = -(-header_size // 32) * 32
    os.truncate(path, data_offset + total)  # sparse: the data section exists but holds no blocks


def best_of(repeat: int, run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def ours(path: Path) -> object:
    with LocalFileSource(path) as source:
        return read_header(source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="best of N runs (default 5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="homelab-bench-") as folder:
        path = Path(folder) / "Qwen2.5-7B-Instruct-Q4_K_M-bench.gguf"
        started = time.perf_counter()
        write_model(path)
        print(
            f"wrote {path.name} in {time.perf_counter() - started:.1f} s "
            f"(file {format_bytes(path.stat().st_size)}, sparse)"
        )

        header = read_header(LocalFileSource(path))
        reference = gguf.GGUFReader(path)
        assert header.weights_bytes == sum(int(t.n_bytes) for t in reference.tensors)
        assert header.data_offset == reference.data_offset
        assert len(header.metadata["tokenizer.ggml.tokens"]) == N_VOCAB
        stats = header.extra["read_stats"]

        t_ours = best_of(args.repeat, lambda: ours(path))
        t_ref = best_of(max(1, args.repeat // 2), lambda: gguf.GGUFReader(path))
        print(
            f"header: {header.header_bytes:,} bytes, {len(header.metadata)} keys, "
            f"{len(header.tensors)} tensors, weights {format_bytes(header.weights_bytes)}"
        )
        print(f"homelab read_header : {t_ours * 1000:9.1f} ms (best of {args.repeat})")
        print(f"gguf.GGUFReader     : {t_ref * 1000:9.1f} ms (best of {max(1, args.repeat // 2)})")
        print(f"speed-up            : {t_ref / t_ours:9.1f}x  (goal >= 10x)")
        print(
            f"cursor              : {stats.bytes_read:,} bytes in {stats.reads} reads = "
            f"{stats.bytes_read / header.header_bytes:.3f}x the header  (goal <= 1.1x)"
        )


if __name__ == "__main__":
    main()
