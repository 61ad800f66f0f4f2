"""Helpers for the remote-header tests (test_remote_*.py, test_quants_cmd.py): GGUF files
shaped for them, the Hugging Face environment pointed at the Hub stand-in, and a bounded
wait for the stand-in's request log.

Imported as ``from remote_fixtures import ...`` (pytest puts this folder on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import pytest

from tests.factory import geometry
from tests.factory.base import ModelWriter
from tests.factory.dense import BUILDERS as DENSE_BUILDERS
from tests.hubstub import HubStub, RecordedRequest


def point_hf_at(stub: HubStub, monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """``HF_ENDPOINT`` → the stand-in, ``HF_HOME`` → ``home`` (an empty HF cache), no token,
    online."""
    monkeypatch.setenv("HF_ENDPOINT", stub.endpoint)
    monkeypatch.setenv("HF_HOME", str(home))
    for name in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN_PATH",
    ):
        monkeypatch.delenv(name, raising=False)


def recorded(hub: HubStub, select: Callable[[RecordedRequest], bool]) -> list[RecordedRequest]:
    """The stand-in's recorded requests that ``select`` keeps.

    ``hub.requests`` waits (bounded) until no answer is still being written: the stand-in
    records a request after answering it, so a client can be done before its record exists.
    """
    return [r for r in hub.requests if select(r)]


def settled(hub: HubStub) -> list[RecordedRequest]:
    """The whole request log, once no answer is still being written."""
    return hub.requests


def write_big_vocab_gguf(path: Path, n_vocab: int = 40_000, **overrides: Any) -> Path:
    """A llama GGUF like the factory's, but with an ``n_vocab``-token BPE-looking vocabulary
    (and merges): a header of megabytes, as real models have, over a data section a few
    times larger (the embedding and output matrices grow with the vocabulary)."""
    g = geometry("llama", **{"n_layer": 4, **overrides})
    mw = ModelWriter(path, "llama", weight_type=g["weight_type"], seed=g["seed"])
    mw.general("homelab-big-vocab")
    tokens = [f"Ġtok{i:06d}" for i in range(n_vocab - 3)] + [
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
    ]
    mw.w.add_tokenizer_model("gpt2")
    mw.w.add_tokenizer_pre("gpt-2")
    mw.w.add_token_list(tokens)
    mw.w.add_token_types([1] * (n_vocab - 3) + [3] * 3)
    mw.w.add_token_merges([f"Ġtok{i:06d} tok{i + 1:06d}" for i in range(n_vocab // 2)])
    mw.w.add_eos_token_id(n_vocab - 1)
    mw.n_vocab = n_vocab
    DENSE_BUILDERS["llama"](mw, g)
    return mw.write()


def write_split_gguf(path: Path, parts: int, arch: str = "llama", **overrides: Any) -> list[Path]:
    """The factory's ``arch`` model written by gguf-py as ``parts`` split files next to
    ``path`` (``Name-00001-of-0000N.gguf``), the way llama-gguf-split names them."""
    g = geometry(arch, **overrides)
    mw = ModelWriter(path, arch, weight_type=g["weight_type"], seed=g["seed"])
    n_tensors = _count_tensors(arch, g)
    mw.w = gguf.GGUFWriter(str(path), arch, split_max_tensors=-(-n_tensors // parts))
    mw.general("homelab-factory-tiny")
    mw.vocab()
    DENSE_BUILDERS[arch](mw, g)
    mw.write()
    stem = path.name.removesuffix(".gguf")
    found = [path.with_name(f"{stem}-{i:05d}-of-{parts:05d}.gguf") for i in range(1, parts + 1)]
    assert all(p.is_file() for p in found), f"gguf-py did not write {parts} parts"
    return found


def _count_tensors(arch: str, g: dict[str, Any]) -> int:
    """How many tensors the factory writes for ``arch`` (by building it into a throwaway writer)."""
    counter = ModelWriter(Path("unused.gguf"), arch, weight_type=g["weight_type"], seed=g["seed"])
    counter.vocab()
    DENSE_BUILDERS[arch](counter, g)
    return len(counter.w.tensors[0]) if counter.w.tensors else 0
