"""An interrupted download resumes where it stopped: a ``Range`` request, not the whole file again.

Interruptions: a dropped connection, Ctrl-C, and a disk that fills up mid-download (a real
one: the HF cache on a small tmpfs that another writer fills while the stand-in Hub is
part-way through the file, so the download's own ``write`` fails with ``ENOSPC``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from homelab.cli import main
from homelab.errors import ExitCode
from homelab.hub import blob_fetch
from homelab.hub.download import PullProgress, pull
from homelab.hub.errors import HubNetworkError
from tests.hubstub import HubStub

REPO = "org/Big-GGUF"
NAME = "Big-Q4_K_M.gguf"


@pytest.fixture
def stub(hub_stub, tiny_gguf) -> HubStub:  # type: ignore[no-untyped-def]
    return hub_stub({REPO: {NAME: tiny_gguf("big.gguf", seed=5, n_layer=48)}})


@pytest.fixture
def size(stub: HubStub) -> int:
    value = stub.file(REPO, NAME).size
    assert value > 3_000_000  # big enough for many network chunks
    return value


def _partial(hf_cache: Path, stub: HubStub) -> Path:
    return (
        hf_cache / "models--org--Big-GGUF" / "blobs" / f"{stub.file(REPO, NAME).sha256}.incomplete"
    )


def _gets(stub: HubStub) -> list[tuple[str | None, int]]:
    return [(r.range, r.bytes_sent) for r in stub.requests_for(NAME) if r.host == "cdn"]


def test_a_dropped_connection_resumes_in_the_same_pull(stub: HubStub, size: int) -> None:
    cut = size // 3
    stub.cut_after(NAME, cut)
    model = pull(REPO)
    assert model.paths[0].stat().st_size == size
    assert _gets(stub) == [(None, cut), (f"bytes={cut}-", size - cut)]
    assert stub.bytes_sent(NAME) == size == model.fetched


def test_an_interrupted_pull_is_resumed_by_the_next_one(
    stub: HubStub, hf_cache: Path, size: int
) -> None:
    def interrupt(event: PullProgress) -> None:
        if event.file_done > size // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pull(REPO, progress=interrupt)
    kept = _partial(hf_cache, stub).stat().st_size
    assert size // 2 < kept < size

    events: list[PullProgress] = []
    model = pull(REPO, progress=events.append)
    first_get, second_get = _gets(stub)
    assert second_get == (f"bytes={kept}-", size - kept)
    assert model.fetched == size - kept
    assert events[0].file_done == kept  # the bar starts where the last run stopped
    assert kept + model.fetched == size  # over both runs, the file came once (not 2x)
    assert first_get[0] is None
    assert model.paths[0].stat().st_size == size
    assert not _partial(hf_cache, stub).exists()


def test_ctrl_c_in_the_cli_exits_130_and_keeps_the_partial_file(
    stub: HubStub,
    hf_cache: Path,
    size: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from homelab.cli import pull_cmd

    real_call = pull_cmd.ProgressBar.__call__

    def ctrl_c_halfway(self: pull_cmd.ProgressBar, event: PullProgress) -> None:
        real_call(self, event)
        if event.file_done > size // 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(pull_cmd.ProgressBar, "__call__", ctrl_c_halfway)
    assert main(["pull", REPO]) == 130
    assert "run the same command to resume" in capsys.readouterr().err
    kept = _partial(hf_cache, stub).stat().st_size
    monkeypatch.setattr(pull_cmd.ProgressBar, "__call__", real_call)
    assert main(["pull", REPO]) == 0
    assert _gets(stub)[-1] == (f"bytes={kept}-", size - kept)


def test_a_stale_partial_longer_than_the_file_is_discarded(
    stub: HubStub, hf_cache: Path, size: int
) -> None:
    partial = _partial(hf_cache, stub)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\0" * (size + 10))
    model = pull(REPO)
    assert _gets(stub) == [(None, size)]
    assert model.paths[0].stat().st_size == size


def test_a_connection_that_keeps_failing_gives_up_with_a_clear_error_and_keeps_the_bytes(
    stub: HubStub, hf_cache: Path, size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(blob_fetch, "RETRY_WAIT_S", 0.01)
    stub.cut_after(NAME, 100_000)
    stub.cut_after(NAME, 0, times=blob_fetch.ATTEMPTS)
    with pytest.raises(HubNetworkError) as raised:
        pull(REPO)
    assert "resumes where it stopped" in (raised.value.hint or "")
    assert _partial(hf_cache, stub).stat().st_size == 100_000
    model = pull(REPO)
    assert _gets(stub)[-1] == ("bytes=100000-", size - 100_000)
    assert model.paths[0].stat().st_size == size


@pytest.fixture
def small_disk(hf_home: Path, stub: HubStub) -> Iterator[Path]:
    """HF_HOME on its own tmpfs with room for the file and 2 MiB more."""
    mib = stub.file(REPO, NAME).size // (1024 * 1024) + 3
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(hf_home)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.strip()}")
    try:
        yield hf_home
    finally:
        subprocess.run(["umount", "-l", str(hf_home)], check=False)


def _wait_for_partial(folder: Path, n_bytes: int, timeout_s: float = 60.0) -> None:
    """Until the download's ``.incomplete`` file under ``folder`` holds ``n_bytes`` (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        partials = list(folder.rglob("*.incomplete"))
        if partials and partials[0].stat().st_size >= n_bytes:
            return
        time.sleep(0.01)
    raise AssertionError(f"the download never wrote {n_bytes:,} bytes under {folder}")


def _fill(folder: Path) -> Path:
    """Write into ``folder`` until its file system is full; returns the filler file."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as handle:
        block = b"\0" * 65536
        try:
            while True:
                handle.write(block)
        except OSError:
            pass
    return filler


def test_a_full_disk_mid_download_keeps_the_partial_file_and_the_next_pull_resumes(
    stub: HubStub, size: int, small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cut = size // 3
    fillers: list[Path] = []

    def fill_once_written() -> None:  # in the stand-in's thread, which sends nothing meanwhile
        _wait_for_partial(small_disk, cut)  # the client wrote all it was sent: nothing in flight
        fillers.append(_fill(small_disk))

    stub.after_sending(NAME, cut, fill_once_written)

    code = main(["pull", REPO])
    err = capsys.readouterr().err
    assert code == ExitCode.FAILURE and fillers, err
    assert "Traceback" not in err
    assert "homelab: Not enough disk space: the disk filled up while downloading" in err
    partial = next((small_disk / "hub").rglob("*.incomplete"))
    kept = partial.stat().st_size
    page = os.sysconf("SC_PAGE_SIZE")  # the partial's last page had room for a few more bytes
    assert cut <= kept <= -(-cut // page) * page < size  # all written before the disk filled
    missing = size - kept
    assert "the download needs " in err and f"({missing:,} bytes) but {partial.parent}" in err
    assert f"the {kept:,} bytes fetched so far are kept in {partial}" in err

    fillers[0].unlink()  # room again
    code = main(["pull", REPO])
    err = capsys.readouterr().err
    assert code == 0, err
    gets = [(r.range, r.bytes_sent) for r in stub.requests_for(NAME) if r.host == "cdn"]
    assert gets[-1] == (f"bytes={kept}-", missing)  # resumed: only what was missing came
    assert not partial.exists()
    blob = partial.with_name(partial.name.removesuffix(".incomplete"))
    assert blob.stat().st_size == size  # the sha256 was checked before it became the blob
    assert shutil.disk_usage(small_disk).free > 0
    assert os.path.ismount(small_disk)
