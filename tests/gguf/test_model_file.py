"""read_model: single files, split models (all parts found from any part), and file errors."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf_bytes import QT, VT, header, kv, kv_str, tensor_info, tensor_payload

from homelab.errors import ExitCode, ModelFileError
from homelab.gguf import source as source_module
from homelab.gguf.header import GgufModel
from homelab.gguf.model_file import read_model, split_part_paths
from homelab.gguf.reader import read_header
from homelab.gguf.source import ByteSource, BytesSource, LocalFileSource

SPLIT_TENSORS = [
    (f"blk.{i}.ffn_up.weight", QT.Q4_K if i % 2 else QT.Q8_0, (2 + i, 256)) for i in range(6)
]


def write_split(folder: Path, parts: int = 3) -> list[Path]:
    """A model split by gguf-py into ``parts`` files, two tensors per part."""
    per_part = len(SPLIT_TENSORS) // parts
    writer = gguf.GGUFWriter(folder / "Model.gguf", "qwen2", split_max_tensors=per_part)
    writer.add_block_count(6)
    writer.add_context_length(4096)
    for index, (name, ggml_type, shape) in enumerate(SPLIT_TENSORS):
        writer.add_tensor(name, tensor_payload(ggml_type, shape, index), raw_dtype=ggml_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    paths = [folder / f"Model-{i:05d}-of-{parts:05d}.gguf" for i in range(1, parts + 1)]
    assert all(p.is_file() for p in paths)
    return paths


def reference_weights(paths: list[Path]) -> int:
    return sum(int(t.n_bytes) for p in paths for t in gguf.GGUFReader(p).tensors)


def test_single_file(tmp_path: Path) -> None:
    path = tmp_path / "one.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("w", np.ones((3, 32), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model = read_model(str(path))
    assert len(model.parts) == 1 and model.arch == "llama"
    assert model.weights_bytes == reference_weights([path]) == 3 * 32 * 2
    assert model.header.source_name == str(path)


def test_split_model_sums_every_part(tmp_path: Path) -> None:
    paths = write_split(tmp_path)
    model = read_model(paths[0])
    assert [p.source_name for p in model.parts] == [str(p) for p in paths]
    assert model.arch == "qwen2" and model.metadata["qwen2.block_count"] == 6
    assert [t.name for t in model.tensors] == [name for name, _, _ in SPLIT_TENSORS]
    assert model.weights_bytes == reference_weights(paths)
    assert model.weights_bytes == sum(p.weights_bytes or 0 for p in model.parts)
    assert all(len(p.tensors) == 2 for p in model.parts)


@pytest.mark.parametrize("given", [1, 2])
def test_any_part_finds_the_others_and_part_one_comes_first(tmp_path: Path, given: int) -> None:
    paths = write_split(tmp_path)
    model = read_model(paths[given])
    assert model.header.source_name == str(paths[0])
    assert model.arch == "qwen2"
    assert model.weights_bytes == reference_weights(paths)


def test_missing_parts_are_named(tmp_path: Path) -> None:
    paths = write_split(tmp_path, parts=3)
    paths[1].unlink()
    paths[2].unlink()
    with pytest.raises(ModelFileError) as caught:
        read_model(paths[0])
    message = caught.value.message
    assert "Model-00002-of-00003.gguf" in message and "Model-00003-of-00003.gguf" in message
    assert "Model-00001" not in message.split("missing")[1]
    assert caught.value.exit_code == ExitCode.BAD_MODEL


def test_renamed_split_part_cannot_find_its_siblings(tmp_path: Path) -> None:
    paths = write_split(tmp_path)
    renamed = paths[0].rename(tmp_path / "model.gguf")
    with pytest.raises(ModelFileError, match="NAME-00001-of-000NN"):
        read_model(renamed)


def test_parts_from_different_models_are_caught(tmp_path: Path) -> None:
    paths = write_split(tmp_path)
    swap = tmp_path / "swap.tmp"
    paths[1].rename(swap)
    paths[2].rename(paths[1])
    swap.rename(paths[2])
    with pytest.raises(ModelFileError, match=r"split\.no"):
        read_model(paths[0])


def test_split_count_in_name_must_match_metadata(tmp_path: Path) -> None:
    paths = write_split(tmp_path)
    wrong = paths[0].rename(tmp_path / "Model-00001-of-00004.gguf")
    with pytest.raises(ModelFileError, match=r"split\.count = 3"):
        read_model(wrong)


def test_split_tensor_count_must_add_up(tmp_path: Path) -> None:
    paths = [tmp_path / f"M-{i:05d}-of-00002.gguf" for i in (1, 2)]
    for index, path in enumerate(paths):
        kvs = [kv_str("general.architecture", "llama")] if index == 0 else []
        path.write_bytes(
            header(
                [
                    *kvs,
                    _u16("split.no", index),
                    _u16("split.count", 2),
                    _i32("split.tensors.count", 3),
                ],
                [tensor_info(f"t{index}", (32,), QT.F32, 0)],
            )
        )
    with pytest.raises(ModelFileError, match=r"hold 2 tensors, but split\.tensors\.count says 3"):
        read_model(paths[0])


def test_split_part_paths() -> None:
    assert split_part_paths(Path("/m/Q-00002-of-00003.gguf"), 3) == [
        Path("/m/Q-00001-of-00003.gguf"),
        Path("/m/Q-00002-of-00003.gguf"),
        Path("/m/Q-00003-of-00003.gguf"),
    ]


def test_model_from_source_reads_one_part() -> None:
    data = header(
        [kv_str("general.architecture", "gemma3")], [tensor_info("w", (64, 2), QT.Q8_0, 0)]
    )
    model = GgufModel((read_header(BytesSource(data, "https://example/x.gguf")),))
    assert model.arch == "gemma3" and model.weights_bytes == 2 * 68
    assert model.header.source_name == "https://example/x.gguf"


# -- the local file source ------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such file"):
        read_model(tmp_path / "nope.gguf")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="is a directory"):
        read_model(tmp_path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read anything")
def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "locked.gguf"
    path.write_bytes(b"GGUF")
    path.chmod(0)
    try:
        with pytest.raises(ModelFileError, match="permission denied"):
            read_model(path)
    finally:
        path.chmod(0o600)


@pytest.mark.parametrize(
    ("failure", "pattern"),
    [
        (PermissionError(13, "Permission denied"), "permission denied"),
        (OSError(5, "Input/output error"), "cannot open .*Input/output error"),
    ],
)
def test_open_failures_become_model_file_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: OSError, pattern: str
) -> None:
    """The same translation as test_unreadable_file, for runs as root (which can read all)."""
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")

    def refuse(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr(source_module, "open_regular", refuse)
    with pytest.raises(ModelFileError, match=pattern):
        read_model(path)


@pytest.mark.parametrize("content", [b"", b"not a model at all", b"\x89PNG\r\n\x1a\n"])
def test_foreign_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "foreign.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelFileError, match=r"foreign\.gguf"):
        read_model(path)


def test_local_source_reads_lazily_and_closes(tmp_path: Path) -> None:
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(256)))
    source = LocalFileSource(path)
    assert isinstance(source, ByteSource)
    path.rename(tmp_path / "moved.bin")  # not opened yet: the constructor does not touch the disk
    (tmp_path / "moved.bin").rename(path)
    with source:
        assert source.size() == 256
        assert source.read(250, 100) == bytes(range(250, 256))
        assert source.read(300, 10) == b""
        assert source.read(1, 3) == b"\1\2\3"
    assert source._file is None


def _u16(key: str, value: int) -> bytes:
    return kv(key, VT.UINT16, value.to_bytes(2, "little"))


def _i32(key: str, value: int) -> bytes:
    return kv(key, VT.INT32, value.to_bytes(4, "little", signed=True))
