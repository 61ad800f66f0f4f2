"""A model's files on disk: where they are, and how big the weights vLLM will load are.

The model is a local folder, or a Hugging Face repo id already in the standard HF
cache (found with ``huggingface_hub``'s offline snapshot lookup; nothing is
downloaded). vLLM loads the top-level ``*.safetensors`` (else ``*.bin``) shards; their sizes on
disk are what it will place on the card (plus small headers). The HF cache keeps
shards as links into ``blobs/``; ``stat`` follows them, and a dangling link (an
interrupted download) is reported rather than priced as nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from homelab.errors import ModelFileError, UsageError


@dataclass(frozen=True, slots=True)
class WeightFiles:
    """The weight files vLLM will load, with their sizes in bytes."""

    files: tuple[tuple[str, int], ...]
    total: int
    source: Literal["safetensors", "bin", "index"]
    """``index``: the shards are not downloaded; ``total`` is the index's ``total_size``."""


def resolve_model_dir(model: str, *, cache_dir: Path | None = None) -> tuple[Path, str | None]:
    """The folder holding the model's files, and the repo id when it came from the HF cache.

    Raises:
        ModelFileError: the repo id is not in the HF cache (nothing is downloaded here).
        UsageError: the name is neither an existing folder nor a valid repo id.
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path, None
    if path.exists():
        raise UsageError(f"{model} is a file; vLLM takes a model folder or a Hugging Face repo id")
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        found = snapshot_download(model, local_files_only=True, cache_dir=cache_dir)
    except HFValidationError:
        raise UsageError(
            f"{model!r} is neither a folder nor a Hugging Face repo id",
            hint="Give the model's folder, or a repo id like Qwen/Qwen3-8B that is already downloaded.",
        ) from None
    except LocalEntryNotFoundError:
        raise ModelFileError(
            f"{model} is not in the Hugging Face cache on this machine (homelab prices it offline)",
            hint=f"Download it first: hf download {model}",
        ) from None
    return Path(str(found)), model


def weight_files(directory: Path) -> WeightFiles:
    """The weights vLLM loads from the folder: top-level ``*.safetensors``, else ``*.bin``.

    Sub-folders are skipped (gpt-oss ships a second copy in ``original/`` that vLLM
    does not load). With no shard on disk, the index's ``total_size`` stands in.

    Raises:
        ModelFileError: no weights and no index, or a shard is a dangling link (an
            interrupted download in the HF cache).
    """
    for pattern, source in (("*.safetensors", "safetensors"), ("*.bin", "bin")):
        found = sorted(p for p in directory.glob(pattern) if not p.name.startswith("."))
        if pattern == "*.bin":
            found = [p for p in found if p.name != "training_args.bin"]
        if found:
            sizes = []
            for p in found:
                try:
                    sizes.append((p.name, p.stat().st_size))
                except OSError as error:
                    raise ModelFileError(
                        f"weight file {p} cannot be read ({error.strerror or error})",
                        hint="The download may be incomplete; download the model again.",
                    ) from None
            return WeightFiles(tuple(sizes), sum(s for _, s in sizes), source)  # type: ignore[arg-type]
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        total = (read_json(index).get("metadata") or {}).get("total_size")
        if isinstance(total, int) and total > 0:
            return WeightFiles((), total, "index")
    raise ModelFileError(
        f"no weight files (*.safetensors or *.bin) in {directory}",
        hint="vLLM loads Hugging Face checkpoints; download the weights, or use llama.cpp for a GGUF.",
    )


def read_json(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ModelFileError(f"cannot read {path}: {error.strerror or error}") from None
    return json_object(raw, path)


def json_object(raw: bytes, path: Path) -> dict[str, Any]:
    """``raw`` (read from ``path``) as a JSON object.

    Raises:
        ModelFileError: not JSON, or not an object.
    """
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFileError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise ModelFileError(f"{path} does not hold a JSON object")
    return data
