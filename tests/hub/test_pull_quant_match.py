"""Choosing files the way llama-server ``-hf`` does, and reading model references."""

from __future__ import annotations

import pytest

from homelab.gguf.file_name import quant_tag, split_info
from homelab.hub.download import PullRef, parse_pull_ref
from homelab.hub.errors import BadModelRefError, QuantNotFoundError
from homelab.hub.quant_match import (
    RemoteFile,
    available_quants,
    is_model_gguf,
    select,
)


def _files(*paths: str) -> list[RemoteFile]:
    return [
        RemoteFile(path, size=100 * (i + 1), sha256=f"{i:064x}") for i, path in enumerate(paths)
    ]


QWEN = _files(
    "README.md",
    "Qwen3-8B-BF16.gguf",
    "Qwen3-8B-IQ4_XS.gguf",
    "Qwen3-8B-Q4_K_M.gguf",
    "Qwen3-8B-Q8_0.gguf",
    "Qwen3-8B-UD-Q4_K_XL.gguf",
    "mmproj-F16.gguf",
    "mmproj-BF16.gguf",
    "mmproj-Q8_0.gguf",
    "imatrix_unsloth.gguf",
)


@pytest.mark.parametrize(
    ("quant", "expected"),
    [
        (None, "Qwen3-8B-Q4_K_M.gguf"),
        ("q4_k_m", "Qwen3-8B-Q4_K_M.gguf"),
        ("Q8_0", "Qwen3-8B-Q8_0.gguf"),
        ("ud-q4_k_xl", "Qwen3-8B-UD-Q4_K_XL.gguf"),
        ("Q4_K_XL", "Qwen3-8B-UD-Q4_K_XL.gguf"),
        ("IQ4_XS", "Qwen3-8B-IQ4_XS.gguf"),
        ("bf16", "Qwen3-8B-BF16.gguf"),
    ],
)
def test_quant_matching(quant: str | None, expected: str) -> None:
    assert select("o/r", QWEN, quant=quant).model.primary.path == expected


def test_default_falls_back_to_q8_0_then_the_first_model() -> None:
    assert select("o/r", _files("a-F16.gguf", "a-Q8_0.gguf")).model.primary.path == "a-Q8_0.gguf"
    assert (
        select("o/r", _files("mmproj-x.gguf", "b-F16.gguf", "a-Q2_K.gguf")).model.primary.path
        == "a-Q2_K.gguf"
    )


def test_projector_closest_in_bits_to_the_model() -> None:
    assert select("o/r", QWEN, quant="Q8_0").mmproj.path == "mmproj-Q8_0.gguf"  # type: ignore[union-attr]
    assert select("o/r", QWEN, quant="BF16").mmproj.path == "mmproj-BF16.gguf"  # type: ignore[union-attr]
    assert select("o/r", QWEN, mmproj=False).mmproj is None


def test_projector_from_the_model_folder_or_above_never_from_a_sibling_folder() -> None:
    files = _files("A/m-Q4_K_M.gguf", "A/mmproj-F16.gguf", "B/mmproj-Q4_0.gguf", "mmproj-Q4_0.gguf")
    assert select("o/r", files).mmproj.path == "A/mmproj-F16.gguf"  # type: ignore[union-attr]
    files = _files("A/m-Q4_K_M.gguf", "B/mmproj-Q4_0.gguf", "mmproj-F16.gguf")
    assert select("o/r", files).mmproj.path == "mmproj-F16.gguf"  # type: ignore[union-attr]
    assert select("o/r", _files("A/m-Q4_K_M.gguf", "B/mmproj-Q4_0.gguf")).mmproj is None


SPLIT = _files(
    "Q4_K_M/Big-Q4_K_M-00002-of-00003.gguf",
    "Q4_K_M/Big-Q4_K_M-00001-of-00003.gguf",
    "Q4_K_M/Big-Q4_K_M-00003-of-00003.gguf",
    "Q8_0/Big-Q8_0-00001-of-00002.gguf",
    "Q8_0/Big-Q8_0-00002-of-00002.gguf",
)


def test_split_models_bring_all_parts_in_order() -> None:
    model = select("o/r", SPLIT).model
    assert [f.path.rsplit("-", 3)[-3] for f in model.files] == ["00001", "00002", "00003"]
    assert model.tag == "Q4_K_M" and model.size == sum(f.size or 0 for f in model.files)
    by_part = select("o/r", SPLIT, filename="q8_0/big-q8_0-00002-of-00002.gguf").model
    assert [f.path for f in by_part.files] == [
        "Q8_0/Big-Q8_0-00001-of-00002.gguf",
        "Q8_0/Big-Q8_0-00002-of-00002.gguf",
    ]
    assert [c.label for c in available_quants(SPLIT)] == ["Q4_K_M", "Q8_0"]


def test_a_split_with_missing_parts_is_refused() -> None:
    with pytest.raises(QuantNotFoundError, match="2 of the 3 parts"):
        select("o/r", SPLIT[:2])


def test_not_found_lists_quants_with_sizes_and_parts() -> None:
    with pytest.raises(QuantNotFoundError) as raised:
        select("o/r", SPLIT, quant="Q5_K_M")
    assert raised.value.available == ("Q4_K_M", "Q8_0")
    assert "Q4_K_M (" in raised.value.message and "3 parts" in raised.value.message
    assert "homelab pull o/r:Q4_K_M" in (raised.value.hint or "")


def test_names() -> None:
    assert quant_tag("x/Model.Q5_K_S.gguf") == "Q5_K_S"
    assert quant_tag("gpt-oss-20b-mxfp4.gguf") == "MXFP4"
    assert quant_tag("model.gguf") is None and quant_tag("README.md") is None
    assert split_info("a/B-Q4_0-00003-of-00010.gguf") == split_info("a/B-Q4_0-00003-of-00010.gguf")
    info = split_info("a/B-Q4_0-00003-of-00010.gguf")
    assert info is not None and (info.prefix, info.tag, info.index, info.count) == (
        "a/B-Q4_0",
        "Q4_0",
        3,
        10,
    )
    assert not is_model_gguf("mmproj-F16.gguf") and not is_model_gguf("imatrix.gguf")
    assert not is_model_gguf("m-mtp-Q8_0.gguf") and is_model_gguf("m-Q8_0.gguf")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bartowski/Qwen3-8B-GGUF", PullRef("bartowski/Qwen3-8B-GGUF")),
        ("bartowski/Qwen3-8B-GGUF:q4_k_m", PullRef("bartowski/Qwen3-8B-GGUF", quant="q4_k_m")),
        ("org/r/sub/M-Q8_0.gguf", PullRef("org/r", filename="sub/M-Q8_0.gguf")),
        ("hf.co/org/r:UD-Q4_K_XL", PullRef("org/r", quant="UD-Q4_K_XL")),
        ("https://huggingface.co/org/r", PullRef("org/r")),
    ],
)
def test_parse_pull_ref(text: str, expected: PullRef) -> None:
    assert parse_pull_ref(text) == expected


@pytest.mark.parametrize(
    "text",
    ["justaname", "org/r:", "org/r/readme.md", "a b/c", "org/r:Q4 K", "o--x/r", "o/r/f.gguf:Q4"],
)
def test_bad_refs(text: str) -> None:
    with pytest.raises(BadModelRefError) as raised:
        parse_pull_ref(text)
    assert "owner/name:QUANT" in (raised.value.hint or "") and raised.value.exit_code == 2
