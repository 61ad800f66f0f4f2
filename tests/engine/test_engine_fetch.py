"""homelab.engine.llamacpp.release: fetching llama.cpp's prebuilt release of the pinned build.

Everything is served by :class:`tests.engine.release_standin.ReleaseStandIn`, a stand-in
for GitHub on 127.0.0.1 (the API's release JSON for the tag, the asset downloads with byte
ranges, a way to cut a download midway), from archives CONSTRUCTED in the test: a stand-in
``llama-server`` shell script answering ``--version`` like b11312, a fake
``libggml-cuda.so`` and the cudart archive. No test reaches the network or runs a real
engine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from homelab.engine.llamacpp import release, release_fetch
from homelab.engine.llamacpp.locate import LLAMA_CPP_COMMIT, release_dir
from homelab.engine.llamacpp.locate import cached_release as installed_release
from homelab.engine.llamacpp.release import asset_names, choose_flavour, fetch_release
from homelab.engine.llamacpp.release_fetch import API_ENV_VAR, ATTEMPTS
from homelab.engine.llamacpp.release_unpack import unpack
from homelab.errors import EngineError
from homelab.gpu.probe import probe
from tests.engine.release_standin import (
    TAG,
    VERSION_B11312,
    Member,
    ReleaseStandIn,
    cudart_archive,
    engine_members,
    make_tar,
    serving,
)

GPU_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu"
CUDA = asset_names("cuda-12.8")  # (engine archive, cudart archive)


@pytest.fixture
def engine_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty data folder (so the engine folder is this test's) and no proxies."""
    monkeypatch.setenv("HOMELAB_DATA_DIR", str(tmp_path / "data"))
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    return tmp_path / "data"


@pytest.fixture
def server(engine_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ReleaseStandIn]:
    """The stand-in serving the cuda-12.8 release (engine + cudart), the API pointed at it."""
    stand_in = ReleaseStandIn({CUDA[0]: make_tar(engine_members()), CUDA[1]: cudart_archive()})
    with serving(stand_in):
        monkeypatch.setenv(API_ENV_VAR, f"http://127.0.0.1:{stand_in.port}")
        yield stand_in


def _fetch_failure() -> EngineError:
    """The EngineError a cuda-12.8 fetch raises (the test fails when none is raised)."""
    with pytest.raises(EngineError) as caught:
        fetch_release(flavour="cuda-12.8")
    return caught.value


def _cache() -> Path:
    return Path(os.environ["HOMELAB_CACHE_DIR"]) / "releases"


def _nothing_installed() -> None:
    """No engine folder, no staging folder and no partial download are left."""
    assert not release_dir("cuda-12.8").exists()
    assert not list(release_dir("cuda-12.8").parent.glob(".*staging*"))
    assert not list(_cache().glob("*.partial"))


# --- choosing a flavour ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("snapshot", "driver", "flavour"),
    [
        ("rtx3090_headless.json", "12.0", "cuda-12.8"),
        ("rtx4060ti16_xorg.json", "12.8", "cuda-12.8"),
        ("per_process_unavailable.json", "12.9", "cuda-12.8"),
        ("rtx3090_wayland.json", "13.1", "cuda-13.4"),
        ("two_gpus.json", "13.1", "cuda-13.4"),
        ("old_driver.json", "11.4", "vulkan"),
    ],
)
def test_flavour_follows_the_recorded_cards_cuda_driver(
    snapshot: str, driver: str, flavour: str
) -> None:
    report = probe(snapshot=GPU_FIXTURES / snapshot, window_s=0)
    assert report.cuda_driver == driver
    assert choose_flavour(report.cuda_driver, has_card=bool(report.devices)) == flavour


def test_no_card_is_refused_unless_a_flavour_is_forced() -> None:
    report = probe(snapshot=GPU_FIXTURES / "no_gpu.json", window_s=0)
    with pytest.raises(EngineError, match="no NVIDIA card") as caught:
        choose_flavour(report.cuda_driver, has_card=bool(report.devices))
    assert "homelab engine build --cpu" in (caught.value.hint or "")
    assert choose_flavour(None, has_card=False, flavour="vulkan") == "vulkan"


def test_unknown_driver_takes_vulkan_and_a_forced_flavour_wins() -> None:
    assert choose_flavour(None) == "vulkan"
    assert choose_flavour("garbage") == "vulkan"
    assert choose_flavour("13.1", flavour="cuda-12.8") == "cuda-12.8"
    with pytest.raises(EngineError, match="unknown release flavour 'rocm'"):
        choose_flavour("13.1", flavour="rocm")


def test_asset_names_are_release_yml_s() -> None:
    assert asset_names("cuda-13.4") == (
        "llama-b11312-bin-ubuntu-cuda-13.4-x64.tar.gz",
        "cudart-llama-b11312-bin-ubuntu-cuda-13.4-x64.tar.gz",
    )
    assert asset_names("vulkan") == ("llama-b11312-bin-ubuntu-vulkan-x64.tar.gz",)
    assert release_dir("vulkan").name == "llama.cpp-b11312-release-vulkan"


def test_vulkan_without_the_loader_is_refused_before_any_download(
    server: ReleaseStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release, "vulkan_loader_present", lambda: False)
    with pytest.raises(EngineError, match=r"libvulkan\.so\.1") as caught:
        fetch_release(flavour="vulkan")
    assert "apt-get install libvulkan1" in (caught.value.hint or "")
    assert server.seen == []


# --- a good fetch ------------------------------------------------------------------------


def test_a_good_fetch_installs_binary_libraries_and_manifest_once(
    server: ReleaseStandIn,
) -> None:
    lines: list[tuple[float | None, str]] = []
    binary = fetch_release(cuda_driver="12.8", progress=lambda f, line: lines.append((f, line)))
    folder = release_dir("cuda-12.8")
    assert binary == folder / "bin" / "llama-server" and os.access(binary, os.X_OK)
    names = {p.name for p in (folder / "bin").iterdir()}
    assert {"libggml-cuda.so", "libcudart.so.12", "libcublas.so.12", "libcublasLt.so.12"} <= names
    assert os.readlink(folder / "bin" / "libllama.so") == "libllama.so.0"
    assert os.readlink(folder / "bin" / "rpc-server") == "ggml-rpc-server"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["origin"] == "release" and manifest["flavour"] == "cuda-12.8"
    assert (manifest["version"], manifest["commit"]) == (TAG, LLAMA_CPP_COMMIT)
    assert manifest["assets"] == [
        {"name": n, "sha256": hashlib.sha256(server.files[n]).hexdigest()} for n in CUDA
    ]
    assert lines[-1][0] == 1.0
    assert [s.status for s in server.downloads()] == [200, 200]
    assert installed_release("cuda-12.8") == binary

    asked = len(server.seen)
    assert fetch_release(cuda_driver="12.8") == binary
    assert len(server.seen) == asked  # complete already: not even the API is asked


def test_force_reinstalls_from_the_verified_cache_without_downloading(
    server: ReleaseStandIn,
) -> None:
    fetch_release(flavour="cuda-12.8")
    (release_dir("cuda-12.8") / "bin" / "libggml-cuda.so").unlink()
    fetch_release(flavour="cuda-12.8", force=True)
    assert (release_dir("cuda-12.8") / "bin" / "libggml-cuda.so").exists()
    assert len(server.downloads()) == 2  # the first fetch's two only


# --- verification --------------------------------------------------------------------------


def test_a_wrong_digest_is_refused_and_leaves_nothing(server: ReleaseStandIn) -> None:
    server.digests[CUDA[0]] = "sha256:" + "0" * 64
    error = _fetch_failure()
    assert error.title == "Download did not verify"
    assert CUDA[0] in error.message and "0" * 64 in error.message
    assert not (_cache() / CUDA[0]).exists()
    _nothing_installed()


def test_an_asset_without_a_digest_is_refused_before_downloading(
    server: ReleaseStandIn,
) -> None:
    server.digests[CUDA[1]] = None
    error = _fetch_failure()
    assert error.title == "Download cannot be verified" and CUDA[1] in error.message
    assert server.downloads() == []
    _nothing_installed()


@pytest.mark.parametrize(
    ("answer", "hint"),
    [
        ("version: 11311 (deadbeef)", "not the pinned build"),
        (
            "./llama-server: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found",
            "C library",
        ),
    ],
)
def test_a_binary_answering_another_build_is_refused(
    server: ReleaseStandIn, answer: str, hint: str
) -> None:
    server.files[CUDA[0]] = make_tar(engine_members(answer))
    error = _fetch_failure()
    assert error.title == "Wrong engine version" and answer.split()[1] in error.message
    assert hint in (error.hint or "")
    _nothing_installed()


def test_too_little_disk_is_said_before_downloading(
    server: ReleaseStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    total = sum(len(data) for data in server.files.values())
    room = SimpleNamespace(free=total)  # fewer bytes than the archives unpacked need
    monkeypatch.setattr(shutil, "disk_usage", lambda path: room)
    error = _fetch_failure()
    assert error.title == "No disk space" and "GiB free" in error.message
    assert server.downloads() == []


# --- interrupted downloads -------------------------------------------------------------------


def test_a_cut_download_resumes_with_a_range_request(server: ReleaseStandIn) -> None:
    server.cuts[CUDA[0]] = 1
    fetch_release(flavour="cuda-12.8")
    first, resumed = server.downloads()[:2]
    half = len(server.files[CUDA[0]]) // 2
    assert (first.range, first.status) == (None, 200)
    assert resumed.status == 206 and resumed.range is not None
    assert 0 < int(resumed.range.removeprefix("bytes=").rstrip("-")) <= half
    manifest = json.loads((release_dir("cuda-12.8") / "manifest.json").read_text())
    assert manifest["assets"][0]["sha256"] == hashlib.sha256(server.files[CUDA[0]]).hexdigest()


def test_a_download_cut_every_time_keeps_its_partial_for_the_next_run(
    server: ReleaseStandIn,
) -> None:
    server.cuts[CUDA[0]] = ATTEMPTS * 10  # every plain download is cut...
    server.ignore_range.add(CUDA[0])  # ...and so is every resume (answered with 200)
    error = _fetch_failure()
    assert error.title == "Download interrupted" and "resumes" in (error.hint or "")
    assert (_cache() / f"{CUDA[0]}.partial").stat().st_size > 0
    assert not release_dir("cuda-12.8").exists()
    server.cuts.clear()
    server.ignore_range.clear()
    fetch_release(flavour="cuda-12.8")
    assert server.downloads()[-2].status == 206  # the engine archive: resumed
    assert installed_release("cuda-12.8") is not None


def test_a_200_answer_to_a_range_request_restarts_the_file_cleanly(
    server: ReleaseStandIn,
) -> None:
    _cache().mkdir(parents=True)
    (_cache() / f"{CUDA[0]}.partial").write_bytes(b"stale bytes of another file" * 100)
    server.ignore_range.add(CUDA[0])
    fetch_release(flavour="cuda-12.8")
    first = server.downloads()[0]
    assert first.range == f"bytes={27 * 100}-" and first.status == 200
    assert installed_release("cuda-12.8") is not None  # it verified: no stale prefix


# --- servers that cannot help ----------------------------------------------------------------


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return int(unused.getsockname()[1])


def test_offline_is_said_plainly(engine_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = _closed_port()
    monkeypatch.setenv(API_ENV_VAR, f"http://127.0.0.1:{port}")
    error = _fetch_failure()
    assert error.title == "Release server unreachable"
    assert f"http://127.0.0.1:{port}" in error.message and "could not be reached" in error.message
    assert "homelab engine build --cuda" in (error.hint or "")
    _nothing_installed()


def test_an_unreachable_download_host_is_said_at_once(server: ReleaseStandIn) -> None:
    server.download_base = f"http://127.0.0.1:{_closed_port()}"
    lines: list[str] = []
    with pytest.raises(EngineError) as caught:
        fetch_release(flavour="cuda-12.8", progress=lambda f, line: lines.append(line))
    assert caught.value.title == "Release server unreachable"
    assert not any("resuming" in line for line in lines)  # no retries against a closed port
    _nothing_installed()


def test_github_is_named_when_the_default_api_is_unreachable(
    engine_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = "http://127.0.0.1:9"  # the default API, moved onto a closed loopback port
    monkeypatch.delenv(API_ENV_VAR, raising=False)
    monkeypatch.setattr(release_fetch, "GITHUB_API", closed)
    error = _fetch_failure()
    assert error.message.startswith("github.com could not be reached")


def test_an_asset_missing_from_the_release_is_named(server: ReleaseStandIn) -> None:
    server.unlisted.add(CUDA[1])
    error = _fetch_failure()
    assert error.title == "Release asset missing" and CUDA[1] in error.message
    assert server.downloads() == []


def test_an_asset_download_answering_404_is_named(server: ReleaseStandIn) -> None:
    server.gone.add(CUDA[0])
    error = _fetch_failure()
    assert error.title == "Release asset missing" and "404" in error.message
    _nothing_installed()


def test_a_spent_rate_limit_is_named(server: ReleaseStandIn) -> None:
    server.api_status = 403
    error = _fetch_failure()
    assert error.title == "GitHub rate limit" and "403" in error.message
    assert "run it again after" in (error.hint or "")


# --- unsafe archives ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("evil", "why"),
    [
        (Member(f"llama-{TAG}/../../escaped", b"x"), "'..'"),
        (Member("{outside}/escaped-absolute", b"x"), "absolute path"),
        (Member(f"llama-{TAG}/libevil.so", link="../../../outside"), "links out"),
        (Member(f"llama-{TAG}/libabs.so", link="/etc/passwd"), "absolute path /etc/passwd"),
        (Member("elsewhere/file", b"x"), "outside the archive's top folder"),
    ],
)
def test_a_member_escaping_the_folder_is_refused(
    server: ReleaseStandIn, engine_home: Path, tmp_path: Path, evil: Member, why: str
) -> None:
    evil.name = evil.name.format(outside=tmp_path)
    server.files[CUDA[0]] = make_tar(engine_members(VERSION_B11312, evil))
    error = _fetch_failure()
    assert error.title == "Unsafe release archive" and why in error.message
    assert repr(evil.name) in error.message
    _nothing_installed()
    assert not list(tmp_path.rglob("escaped*")) and not list(engine_home.rglob("bin"))


def test_hard_links_may_point_inside_the_archive_only(tmp_path: Path) -> None:
    top = f"llama-{TAG}"
    inside = [Member(top, folder=True), Member(f"{top}/libggml.so.0", b"ggml")]
    good = tmp_path / "good.tar.gz"
    good.write_bytes(
        make_tar([*inside, Member(f"{top}/libggml.so", link=f"{top}/libggml.so.0", hard=True)])
    )
    (tmp_path / "good").mkdir()
    unpack(good, tmp_path / "good")
    assert (tmp_path / "good" / "libggml.so").read_bytes() == b"ggml"
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(make_tar([*inside, Member(f"{top}/libx.so", link="other/secret", hard=True)]))
    (tmp_path / "bad").mkdir()
    with pytest.raises(EngineError, match="hard link to other/secret") as caught:
        unpack(bad, tmp_path / "bad")
    assert caught.value.title == "Unsafe release archive"
    assert list((tmp_path / "bad").iterdir()) == []
