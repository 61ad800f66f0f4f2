"""``pull`` downloads into the standard HF cache, laid out exactly as huggingface_hub does it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from huggingface_hub import hf_hub_download, try_to_load_from_cache

from homelab.hub.download import PullProgress, pull
from tests.hubstub import DEFAULT_REVISION_SHA, HubStub

REPO = "org/Tiny-GGUF"


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub(
        {
            REPO: {
                "Tiny-Q4_K_M.gguf": tiny_gguf("q4.gguf", seed=1),
                "Tiny-Q8_0.gguf": tiny_gguf("q8.gguf", seed=2, n_layer=2),
                "mmproj-Tiny-F16.gguf": tiny_gguf("mm.gguf", seed=3),
                "README.md": b"# tiny\n",
            },
            "org/Split-GGUF": {
                **{
                    f"Q4_K_M/Split-Q4_K_M-{i:05d}-of-00003.gguf": tiny_gguf(
                        f"split{i}.gguf", seed=10 + i
                    )
                    for i in (1, 2, 3)
                },
                "Split-Q8_0.gguf": tiny_gguf("split-q8.gguf", seed=20),
            },
        }
    )


def _blob_gets(stub: HubStub, filename: str) -> list[int]:
    return [r.bytes_sent for r in stub.requests_for(filename) if r.host == "cdn"]


def test_pull_lays_out_blobs_snapshots_and_refs(stub: HubStub, hf_cache: Path) -> None:
    model = pull(REPO)
    q4 = stub.file(REPO, "Tiny-Q4_K_M.gguf")
    repo_dir = hf_cache / "models--org--Tiny-GGUF"
    snapshot = repo_dir / "snapshots" / DEFAULT_REVISION_SHA
    assert model.paths == (snapshot / "Tiny-Q4_K_M.gguf",)
    assert (model.repo, model.revision, model.quant) == (REPO, DEFAULT_REVISION_SHA, "Q4_K_M")
    assert model.mmproj == snapshot / "mmproj-Tiny-F16.gguf"
    assert (repo_dir / "refs" / "main").read_text() == DEFAULT_REVISION_SHA
    assert os.readlink(model.paths[0]) == f"../../blobs/{q4.sha256}"
    assert (repo_dir / "blobs" / q4.sha256).read_bytes() == q4.read(0, q4.size)
    assert sorted(p.name for p in (repo_dir / "blobs").iterdir()) == sorted(
        [q4.sha256, stub.file(REPO, "mmproj-Tiny-F16.gguf").sha256]
    )
    assert model.fetched == q4.size + stub.file(REPO, "mmproj-Tiny-F16.gguf").size
    assert not model.from_cache and model.note is None


def test_huggingface_hub_and_llama_server_find_what_pull_cached(
    stub: HubStub, hf_cache: Path
) -> None:
    model = pull(REPO)
    found = try_to_load_from_cache(REPO, "Tiny-Q4_K_M.gguf", cache_dir=hf_cache)
    assert found == str(model.paths[0])
    again = hf_hub_download(
        REPO, "Tiny-Q4_K_M.gguf", cache_dir=hf_cache, endpoint=stub.endpoint, token=False
    )
    assert again == str(model.paths[0])
    assert _blob_gets(stub, "Tiny-Q4_K_M.gguf") == [stub.file(REPO, "Tiny-Q4_K_M.gguf").size]


def test_pull_reuses_what_hf_download_cached(stub: HubStub, hf_cache: Path) -> None:
    for name in ("Tiny-Q8_0.gguf", "mmproj-Tiny-F16.gguf"):
        hf_hub_download(REPO, name, cache_dir=hf_cache, endpoint=stub.endpoint, token=False)
    before = len(stub.requests)
    events: list[PullProgress] = []
    model = pull(f"{REPO}:Q8_0", progress=events.append)
    assert model.fetched == 0
    assert [r for r in stub.requests[before:] if r.host == "cdn"] == []
    assert {e.state for e in events} == {"cached", "done"}


def test_second_pull_fetches_nothing(stub: HubStub) -> None:
    first = pull(REPO)
    second = pull(REPO)
    assert second == first.__class__(**{**first.__dict__, "fetched": 0})
    assert _blob_gets(stub, "Tiny-Q4_K_M.gguf") == [stub.file(REPO, "Tiny-Q4_K_M.gguf").size]


def test_quant_is_case_insensitive_and_explicit_files_work(stub: HubStub) -> None:
    assert pull(f"{REPO}:q8_0").paths[0].name == "Tiny-Q8_0.gguf"
    by_file = pull(f"{REPO}/tiny-q8_0.GGUF", mmproj=False)
    assert by_file.paths[0].name == "Tiny-Q8_0.gguf" and by_file.mmproj is None


def test_no_mmproj_skips_the_projector(stub: HubStub, hf_cache: Path) -> None:
    model = pull(REPO, mmproj=False)
    assert model.mmproj is None
    assert stub.requests_for("mmproj-Tiny-F16.gguf", method=None) == []


def test_split_model_brings_every_part_in_order(stub: HubStub) -> None:
    events: list[PullProgress] = []
    model = pull("org/Split-GGUF", progress=events.append)
    names = [p.name for p in model.paths]
    assert names == [f"Split-Q4_K_M-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert all(p.parent.name == "Q4_K_M" and p.is_file() for p in model.paths)
    assert model.quant == "Q4_K_M" and model.mmproj is None
    total = sum(stub.file("org/Split-GGUF", f"Q4_K_M/{n}").size for n in names)
    assert events[-1].done == events[-1].total == total and events[-1].count == 3
    assert stub.requests_for("Split-Q8_0.gguf", method=None) == []


def test_progress_events_add_up(stub: HubStub) -> None:
    events: list[PullProgress] = []
    model = pull(REPO, progress=events.append)
    total = sum(stub.file(REPO, n).size for n in ("Tiny-Q4_K_M.gguf", "mmproj-Tiny-F16.gguf"))
    assert all(e.total == total for e in events)
    assert [e.done for e in events] == sorted(e.done for e in events)
    assert events[-1].done == total and events[-1].fetched == model.fetched == total
    done_events = [e for e in events if e.state == "done"]
    assert [(e.filename, e.index, e.count) for e in done_events] == [
        ("Tiny-Q4_K_M.gguf", 1, 2),
        ("mmproj-Tiny-F16.gguf", 2, 2),
    ]
    assert all(e.file_done == e.file_total for e in done_events)


def test_hf_hub_cache_variable_moves_the_cache(
    stub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    model = pull(REPO, mmproj=False)
    assert model.paths[0].is_relative_to(tmp_path / "elsewhere" / "models--org--Tiny-GGUF")
