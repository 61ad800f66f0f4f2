"""Header-only GGUFs at real dense sizes for the set-placement tests: Llama-shaped Q4_K_M
models of about 1B, 8B, 14B and 70B parameters (the data section a hole, so a 40 GB model
is written in a moment and planned as the real file would be)."""

from __future__ import annotations

from pathlib import Path

from tests.factory import geometry
from tests.factory.dense import build_llama
from tests.factory.header_only import HeaderOnlyWriter, q4_k_m_rule

SHAPES = {
    "fim-1b": (16, 2048, 8192),
    "coder-8b": (32, 4096, 14336),
    "chat-14b": (48, 5120, 13824),
    "big-70b": (80, 8192, 28672),
}
"""(blocks, width, feed-forward width) of each model: Llama 3.2 1B, Llama 3.1 8B, a
Qwen2.5-14B-wide Llama, Llama 3.1 70B; eight KV heads of 128 each."""


def write_dense(folder: Path, key: str) -> Path:
    """The model ``key`` of :data:`SHAPES` as ``folder/KEY-Q4_K_M.gguf``, named ``KEY``."""
    n_layer, n_embd, n_ff = SHAPES[key]
    g = geometry(
        "llama",
        n_layer=n_layer,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_embd // 128,
        n_head_kv=8,
        n_ctx_train=131072,
    )
    mw = HeaderOnlyWriter(folder / f"{key}-Q4_K_M.gguf", "llama", q4_k_m_rule(n_layer, 0), 128_256)
    mw.general(key)
    mw.vocab()
    build_llama(mw, g)
    return mw.write()


def write_all(folder: Path) -> dict[str, Path]:
    return {key: write_dense(folder, key) for key in SHAPES}
