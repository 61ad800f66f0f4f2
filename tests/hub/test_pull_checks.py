"""Before and after the bytes: free disk space checked first, sha256 checked last."""

from __future__ import annotations

from pathlib import Path

import pytest

from homelab.cli import main
from homelab.hub import download
from homelab.hub.download import pull
from homelab.hub.errors import ChecksumMismatchError, NotEnoughDiskError
from homelab.units import format_bytes
from tests.hubstub import HubStub

REPO = "org/Tiny-GGUF"
NAME = "Tiny-Q4_K_M.gguf"


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub(
        {
            REPO: {
                NAME: tiny_gguf("q4.gguf", seed=1, n_layer=8),
                "mmproj-F16.gguf": tiny_gguf("mm.gguf"),
            }
        }
    )


def _repo_dir(hf_cache: Path) -> Path:
    return hf_cache / "models--org--Tiny-GGUF"


def test_a_corrupted_download_is_deleted_and_reported(stub: HubStub, hf_cache: Path) -> None:
    stub.corrupt(NAME, times=1)
    sha = stub.file(REPO, NAME).sha256
    with pytest.raises(ChecksumMismatchError) as raised:
        pull(REPO, mmproj=False)
    assert sha in raised.value.message and "deleted" in raised.value.message
    blobs = _repo_dir(hf_cache) / "blobs"
    assert not (blobs / sha).exists() and not (blobs / f"{sha}.incomplete").exists()
    assert not (_repo_dir(hf_cache) / "snapshots").exists()
    model = pull(REPO, mmproj=False)  # the server is fine again: a fresh, whole download
    assert (blobs / sha).stat().st_size == stub.file(REPO, NAME).size
    assert model.fetched == stub.file(REPO, NAME).size


def test_checksum_mismatch_exits_1_with_a_message(
    stub: HubStub, capsys: pytest.CaptureFixture[str]
) -> None:
    stub.corrupt(NAME)
    assert main(["pull", REPO, "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Checksum mismatch" in err and "the bad file was deleted" in err


def test_not_enough_disk_refuses_before_downloading(stub: HubStub) -> None:
    needed = stub.file(REPO, NAME).size + stub.file(REPO, "mmproj-F16.gguf").size
    asked: list[Path] = []

    def free(path: Path) -> int:
        asked.append(path)
        return needed - 1

    with pytest.raises(NotEnoughDiskError) as raised:
        pull(REPO, free_space=free)
    error = raised.value
    assert (error.needed, error.free) == (needed, needed - 1)
    assert f"{needed:,} bytes" in error.message and f"{needed - 1:,} bytes" in error.message
    assert format_bytes(needed) in error.message
    assert asked and asked[0].name == "hub"
    assert [r for r in stub.requests if r.host == "cdn"] == []
    assert pull(REPO, free_space=lambda _: needed).fetched == needed


def test_bytes_already_on_disk_are_not_counted_again(stub: HubStub, hf_cache: Path) -> None:
    size = stub.file(REPO, NAME).size
    partial = _repo_dir(hf_cache) / "blobs" / f"{stub.file(REPO, NAME).sha256}.incomplete"
    partial.parent.mkdir(parents=True)
    partial.write_bytes(stub.file(REPO, NAME).read(0, 1000))
    with pytest.raises(NotEnoughDiskError) as raised:
        pull(REPO, mmproj=False, free_space=lambda _: 0)
    assert raised.value.needed == size - 1000
    pull(REPO, mmproj=False)
    assert (
        pull(REPO, mmproj=False, free_space=lambda _: 0).fetched == 0
    )  # all cached: nothing needed


def test_not_enough_disk_in_the_cli(
    stub: HubStub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(download, "disk_free", lambda _path: 1234)
    assert main(["pull", REPO]) == 1
    err = capsys.readouterr().err
    assert "Not enough disk space" in err and "1,234 bytes" in err and "HF_HOME" in err
